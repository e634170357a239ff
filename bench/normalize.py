"""Per-sentence cost of ChatTTS text normalization (``engines/chattts/normalize``), by language.

    .venv/bin/python -m bench.normalize              # about a second
    .venv/bin/python -m bench.normalize --rounds 50  # fewer or more timed calls per sentence

Each sentence is normalized ``--rounds`` times after one warm-up call (which also loads the optional grammars when
installed); every call is timed on its own. Prints a Markdown table of p50/p95 microseconds per sentence and writes
every figure to ``bench/results/normalize.json``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
from pathlib import Path

from engines.chattts.normalize import active_normalizer, normalize_text

__all__ = ["SENTENCES", "main", "measure"]

RESULTS = Path(__file__).resolve().parent / "results" / "normalize.json"

SENTENCES: dict[str, list[str]] = {
    "English": [
        "Your order #4521 costs $19.99 and arrives on 3/14 at 10:30am.",
        "Dr. Smith lives at 221B Baker St. and was born on March 14, 1990.",
        "Growth was 12.5% in 2024, up from -3.2% the year before.",
        "Call +1 415-555-0100 or email support@example.com before 5pm.",
        "The 3rd model weighs 1,250 kg and reaches 120 km/h in 9.5 s.",
        "Download 2.5 GB at 100 Mbps from https://www.example.com/files today.",
        "Prices rose 3-5% between 1990 and 2000, e.g. bread & milk.",
        "Meet me on 2025-03-14 at 14:00, room 101.",
        "It was -40°F outside, so we stayed in.",
        "No digits here, just a plain sentence that needs nothing at all.",
    ],
    "Chinese": [
        "会议定于2025年3月14日下午3点，预算为12.5万元",  # noqa: RUF001
        "今年的销售额增长了15%，达到1,234万元",  # noqa: RUF001
        "请在2025-03-14之前拨打13812345678联系我们",
        "气温在-10℃到5℃之间，湿度为60%",  # noqa: RUF001
        "他跑了3.5公里，用时25分钟",  # noqa: RUF001
        "我们有2000名员工，分布在12个城市",  # noqa: RUF001
        "下午2点半在3号会议室开会",
        "这台电脑有16GB内存和512GB硬盘",
        "人口约为14亿，其中城镇人口占65.2%",  # noqa: RUF001
        "这是一句没有数字的普通句子。",
    ],
    "mixed": [
        "我花了$20买了2本书，call me at 555-123-4567.",  # noqa: RUF001
        "Apple在2007年发布了iPhone，售价$499",  # noqa: RUF001
        "请发邮件到info@example.com，我们会在24小时内回复",  # noqa: RUF001
        "这个price是$9.99，比上个月便宜了10%",  # noqa: RUF001
        "Meet me at 3点 in room 101",
        "我们在2024年卖了1,000台iPhone和500台iPad",
        "The meeting is at 9:05 a.m.，地点在5楼",  # noqa: RUF001
        "下载速度为100 Mbps，file size is 2.5 GB",  # noqa: RUF001
        "网址是www.example.cn，open 24/7",  # noqa: RUF001
        "I paid 100元 for 2个苹果",
    ],
}


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def measure(rounds: int) -> dict[str, dict[str, float]]:
    """p50, p95 and mean microseconds per sentence call for each language."""
    normalize_text("warm-up: 1")
    results: dict[str, dict[str, float]] = {}
    for language, sentences in SENTENCES.items():
        timings: list[float] = []
        for sentence in sentences:
            normalize_text(sentence)
            for _ in range(rounds):
                started = time.perf_counter_ns()
                normalize_text(sentence)
                timings.append((time.perf_counter_ns() - started) / 1000)
        results[language] = {"p50_us": _percentile(timings, 0.5), "p95_us": _percentile(timings, 0.95),
                             "mean_us": statistics.fmean(timings), "calls": len(timings)}  # fmt: skip
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=200, help="timed calls per sentence")
    args = parser.parse_args()
    normalizer = active_normalizer()
    results = measure(args.rounds)
    print(f"normalizer: {normalizer}, {args.rounds} calls per sentence, Python {platform.python_version()}\n")
    print("| text | sentences | p50 µs | p95 µs | mean µs |\n|---|---|---|---|---|")
    for language, row in results.items():
        count = len(SENTENCES[language])
        print(f"| {language} | {count} | {row['p50_us']:.0f} | {row['p95_us']:.0f} | {row['mean_us']:.0f} |")
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    report = {"normalizer": normalizer, "rounds": args.rounds, "python": platform.python_version(), "results": results}
    RESULTS.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
