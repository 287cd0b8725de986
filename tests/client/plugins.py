"""Subcommand plugins for the CLI discovery tests: one good, one that raises, one that clashes."""


def good(subparsers):
    p = subparsers.add_parser("hello", help="a plugin command")
    p.add_argument("--code", type=int, default=0)
    p.set_defaults(func=lambda args: args.code)


def broken(subparsers):
    raise RuntimeError("plugin exploded\nwith a second line")


def clashing(subparsers):
    subparsers.add_parser("produce")
