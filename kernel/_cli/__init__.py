"""The command line: `statekernel` (and `python -m statekernel`), for looking inside a store.

A face, like `statekernel` itself: it sits above every layer and is the one part of the
package that opens stores (`statekernel.stores`) on its own, because its user names a
database, not a store class. It reads through the public API only (a plain `Kernel` with no
plugins, the stores' `read_only=True`), so what it shows is what any program could read,
and it never creates or changes a store. Given the application (`--app module:attr`), its
kernel registers the application's keys too, and nothing else of it. Nothing is exported
from here.
"""
