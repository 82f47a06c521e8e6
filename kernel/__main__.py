"""`python -m statekernel`: the command line (`statekernel --help`)."""

from statekernel._cli.main import main

raise SystemExit(main())
