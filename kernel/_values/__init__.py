"""Values: what hooks read and return, and the declarations that type them.

Keys, action and effect specs, commands, the persistent `Vector`, frozen tool arguments,
messages, tool and model values, phases, and how a declared type is read (what is immutable,
what must be copied, zero values). Everything here is plain data and its declaration: no
engine, no I/O. Every layer above builds on it. Nothing is exported from here; the public
names are re-exported by `statekernel` and `statekernel.lowlevel`.
"""
