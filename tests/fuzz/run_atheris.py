"""Coverage-guided fuzzing of the codec with atheris: ``make fuzz`` (FUZZ_SECONDS, default 300).

    python tests/fuzz/run_atheris.py --seconds 300 [--corpus DIR]

Seeds the corpus with the captured conversations of four real clients, runs for a bounded
time, and leaves any crashing input as ``crash-*`` in the working directory: copy it to
tests/data/fuzz-regressions/ and tests/fuzz/test_regressions.py replays it in ``make test``."""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=int, default=300)
    ap.add_argument("--corpus", default=None)
    args, rest = ap.parse_known_args()
    import atheris

    with atheris.instrument_imports():
        from tests.fuzz.harness import one_input, seeds
    corpus = Path(args.corpus or tempfile.mkdtemp(prefix="fetchlat-fuzz-"))
    corpus.mkdir(parents=True, exist_ok=True)
    for i, s in enumerate(seeds()):
        (corpus / f"seed-{i:04d}").write_bytes(s)
    for f in sorted((ROOT / "tests" / "data" / "fuzz-regressions").glob("*")):
        if f.is_file() and f.name != "README.md":
            (corpus / f"regression-{f.name}").write_bytes(f.read_bytes())
    print(f"corpus {corpus}: {len(os.listdir(corpus))} inputs; fuzzing for {args.seconds} s", flush=True)
    atheris.Setup([sys.argv[0], f"-max_total_time={args.seconds}", "-max_len=65536", "-rss_limit_mb=2048",
                   "-print_final_stats=1", *rest, str(corpus)], one_input)
    atheris.Fuzz()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
