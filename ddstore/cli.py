"""Command-line helpers for ddstore's programs and its examples: ``argparse`` types that
refuse a value out of range with argparse's own error (exit code 2, the option named),
before anything is built or any rank waits for another."""
import argparse

__all__ = ["at_least", "int_list", "check_windows"]


def at_least(least, kind=int, above=False):
    """An ``argparse`` ``type=`` for the command lines of ddstore's programs and
    examples: the option's text as ``kind`` (int or float), refused by argparse (exit code
    2, the option named) unless it is ``>= least`` (``> least`` with ``above``; NaN
    never passes)."""
    def convert(text):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
        if not (value > least if above else value >= least):
            raise argparse.ArgumentTypeError(
                f"must be {'an integer' if kind is int else 'a number'} "
                f"{'>' if above else '>='} {least}, got {text}")
        return value
    convert.__name__ = kind.__name__  # argparse's "invalid <name> value" wording
    return convert


def int_list(least):
    """An ``argparse`` ``type=`` for comma-separated integers (fan-outs, depths), each
    ``>= least``: the text as a tuple of ints."""
    one = at_least(least)

    def convert(text):
        return tuple(one(part.strip()) for part in text.split(","))
    convert.__name__ = "comma-separated integers"
    return convert


def check_windows(parser, args):
    """After ``parser.parse_args``: a series of ``args.steps`` time steps must hold a
    window of ``args.horizon`` steps and its target (``2 x horizon + 1`` steps at
    least), else argparse's error naming both options (exit code 2)."""
    if args.steps < 2 * args.horizon + 1:
        parser.error(f"--steps {args.steps}: must be more than 2 x --horizon = "
                     f"{2 * args.horizon} (a window and its target)")
