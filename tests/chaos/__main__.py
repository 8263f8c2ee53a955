"""``python -m tests.chaos --seed N --minutes M`` (``make chaos SEED=N MINUTES=M``): one
campaign, its report on stdout and in ``<out>/report.json``; exit 1 on any violation.
``--faults kind,kind`` replays the seed's plan with those fault kinds only."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
from pathlib import Path

from tests.chaos import report
from tests.chaos.plan import FAULT_KINDS, make_plan
from tests.chaos.runner import REPO, SETTLE_SECONDS, campaign


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.chaos")
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--settle-seconds", type=float, default=SETTLE_SECONDS)
    parser.add_argument("--out", type=Path, help="the run's folder (default build/chaos/…)")
    parser.add_argument(
        "--faults", help=f"comma-separated fault kinds to keep (of {', '.join(FAULT_KINDS)})"
    )
    args = parser.parse_args(argv)
    plan = make_plan(args.seed, args.minutes)
    if args.faults:
        kinds = {k.strip() for k in args.faults.split(",") if k.strip()}
        unknown = kinds - set(FAULT_KINDS)
        if unknown:
            parser.error(f"unknown fault kinds: {', '.join(sorted(unknown))}")
        plan = plan.keep_faults(kinds)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = args.out or REPO / "build" / "chaos" / f"seed-{args.seed}-{stamp}"
    print(f"chaos campaign: seed {args.seed}, {args.minutes:g} min; its folder {out}", flush=True)
    (out / "logs").mkdir(parents=True, exist_ok=True)
    # What the product's client logs (an outage it met) goes to the run's folder.
    logging.basicConfig(
        filename=out / "logs" / "campaign.log",
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
    )
    result = asyncio.run(campaign(plan, out, args.settle_seconds))
    (out / "report.json").write_text(json.dumps(result, indent=2, default=str))
    shown = report.text(result)
    (out / "report.txt").write_text(shown + "\n")
    print(shown)
    return 1 if result["violations"] else 0


if __name__ == "__main__":
    sys.exit(main())
