"""The ``pdtp`` command line (also ``python -m pdtp``).

Human-readable tables by default, ``--json`` for machines. Exit codes: 0 = valid / success,
1 = invalid pair or infeasible plan, 2 = usage error (bad flags or values).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any

from ._table import ranges, table
from .errors import PdtpError

EXIT_OK, EXIT_INVALID, EXIT_USAGE = 0, 1, 2

EPILOG = """\
examples:
  pdtp check --heads 64 --kv-heads 8 --prefill-tp 4 --decode-tp 8
  pdtp check --config ./Llama-3.1-70B/config.json --prefill-tp 8 --decode-tp 8 --json
  pdtp map --kv-heads 4 --prefill-tp 4 --decode-tp 8 --connector nixl

exit codes: 0 valid, 1 invalid, 2 usage error
"""


def _add_model_flags(p: argparse.ArgumentParser, *, need_heads: bool = True) -> None:
    g = p.add_argument_group("model (give a catalog name, a config, or the head counts)")
    g.add_argument("--model", metavar="NAME", help="catalog name or HF id, e.g. llama-3.1-70b")
    g.add_argument("--config", metavar="PATH", help="HF config.json (or a model folder)")
    if need_heads:
        g.add_argument("--heads", type=int, metavar="A", help="total attention heads")
    g.add_argument("--kv-heads", type=int, metavar="H", help="total KV heads")
    g.add_argument(
        "--mla", action="store_true", help="the model uses MLA (DeepSeek-V3, Kimi-K2 ...)"
    )


def _add_pair_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--prefill-tp", "-P", type=int, required=True, metavar="P", help="prefill TP size"
    )
    p.add_argument("--decode-tp", "-D", type=int, required=True, metavar="D", help="decode TP size")
    p.add_argument(
        "--connector",
        default="moriio",
        help="KV connector rule profile: moriio (default), nixl, nixl-legacy",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="pdtp",
        description=(
            "Plan vLLM prefill/decode disaggregated deployments: check that a prefill/decode "
            "tensor-parallel pair is one vLLM's KV connector accepts, see who reads from whom."
        ),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    c = sub.add_parser(
        "check",
        help="is this P/D pair valid for the model and connector?",
        description=(
            "Check a (prefill TP, decode TP) pair against vLLM's rules: model loading, the "
            "connector's size rule and (MoRIIO) the replicated-KV-head guard. Prints every "
            "violation with vLLM's exact message, a hint, warnings and the nearest valid pairs."
        ),
        epilog="example: pdtp check --heads 64 --kv-heads 8 --prefill-tp 4 --decode-tp 8",
    )
    _add_model_flags(c)
    _add_pair_flags(c)
    c.add_argument("--max-acks", type=int, metavar="K", help="cap on release acks per prefill rank")
    c.add_argument("--max-tp", type=int, metavar="T", help="largest TP size to propose instead")

    m = sub.add_parser(
        "map",
        help="which prefill rank(s) each decode rank reads, and the KV heads moved",
        description=(
            "Print the transfer map of a valid pair: per decode rank the prefill rank(s) it "
            "reads and the KV heads received; per prefill rank its heads, readers and acks."
        ),
        epilog="example: pdtp map --kv-heads 4 --prefill-tp 4 --decode-tp 8",
    )
    _add_model_flags(m, need_heads=False)
    _add_pair_flags(m)
    return parser


class UsageError(Exception):
    pass


def _shape(args: argparse.Namespace) -> Any:
    from .check import ModelShape, model_shape

    given = [x for x in ("model", "config") if getattr(args, x, None)]
    if len(given) > 1:
        raise UsageError("give only one of --model and --config")
    if given:
        return model_shape(getattr(args, given[0]))
    heads = getattr(args, "heads", None)
    if args.kv_heads is None:
        raise UsageError("give --model NAME, --config PATH, or the head counts (--kv-heads H)")
    if heads is None:
        heads = args.kv_heads  # `map` needs no attention-head count
    return ModelShape(heads, args.kv_heads, args.mla)


def _cmd_check(args: argparse.Namespace) -> int:
    from .check import check

    r = check(
        _shape(args),
        args.prefill_tp,
        args.decode_tp,
        connector=args.connector,
        max_acks=args.max_acks,
        max_tp=args.max_tp,
    )
    if args.json:
        print(json.dumps(r.to_dict(), indent=2))
        return EXIT_OK if r.ok else EXIT_INVALID
    print(f"{r.model}: prefill_tp={r.prefill_tp}  decode_tp={r.decode_tp}  connector={r.connector}")
    print("VALID" if r.ok else f"INVALID ({len(r.violations)} violation(s))")
    for v in r.violations:
        err = f"  [vLLM {v.vllm_error}]" if v.vllm_error else ""
        print(f"\n  x {v.code} ({v.side}){err}\n    {v.message}\n    hint: {v.hint}")
    for w in r.warnings:
        print(f"\n  ! {w.code}\n    {w.message}")
    if r.alternatives:
        alts = ", ".join(f"P{p}/D{d}" for p, d in r.alternatives)
        print(f"\nnearest valid pairs: {alts}")
    return EXIT_OK if r.ok else EXIT_INVALID


def _cmd_map(args: argparse.Namespace) -> int:
    from .transfer import transfer_map

    shape = _shape(args)
    tm = transfer_map(
        args.prefill_tp,
        args.decode_tp,
        kv_heads=shape.num_kv_heads,
        is_mla=shape.is_mla,
        connector=args.connector,
    )
    if args.json:
        print(json.dumps(tm.to_dict(), indent=2))
        return EXIT_OK
    kind = "MLA latent" if tm.is_mla else f"{tm.kv_heads} KV heads"
    print(f"P{tm.prefill_tp} -> D{tm.decode_tp}, {kind}, connector={tm.connector}\n")
    print(
        table(
            ["decode rank", "holds heads", "reads (prefill rank: heads)"],
            [
                [
                    d.rank,
                    ranges(d.heads),
                    "  ".join(f"{r.prefill_rank}: {ranges(r.heads)}" for r in d.reads),
                ]
                for d in tm.decode
            ],
        )
    )
    print()
    print(
        table(
            ["prefill rank", "holds heads", "read by decode ranks", "acks expected"],
            [
                [
                    p.rank,
                    ranges(p.heads),
                    ranges(p.readers) if p.readers else "(never read)",
                    p.expected_acks,
                ]
                for p in tm.prefill
            ],
        )
    )
    for w in tm.warnings:
        print(f"\n! {w.code}: {w.message}")
    return EXIT_OK


COMMANDS = {"check": _cmd_check, "map": _cmd_map}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return EXIT_USAGE
    try:
        return COMMANDS[args.command](args)
    except UsageError as e:
        parser.error(str(e))  # exits 2
    except (PdtpError, TypeError, ValueError, OverflowError) as e:
        # Rule errors from `map` (an invalid pair) are a "no", not a usage mistake.
        from .errors import RuleAssertionError, RuleNotImplementedError, RuleValueError

        if isinstance(e, (RuleValueError, RuleNotImplementedError, RuleAssertionError)):
            print(f"pdtp {args.command}: invalid pair: {e}", file=sys.stderr)
            return EXIT_INVALID
        print(f"pdtp {args.command}: error: {e}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
