"""Built-in plugins for statekernel, written only against `kernel`'s public API."""
