"""ProfileStore and ThreadStore backends (memory, SQLite) implementing kernel's protocols."""
