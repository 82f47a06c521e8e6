"""Command-line entry point: `python -m kernel demo`."""

from __future__ import annotations

import argparse
import asyncio


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernel", description="statekernel tools")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="run the worked example: one run, every phase printed")
    args = parser.parse_args(argv)
    if args.command == "demo":
        from .demo import main as demo

        asyncio.run(demo())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
