"""What a tenant's pronunciation dictionaries let it cost others: a bystander's first byte on espeak while an attacker
expands and recompiles (issue #47).

    .venv/bin/python -m bench.pronunciation_cost                 # about a minute and a half on 2 cores
    .venv/bin/python -m bench.pronunciation_cost --seconds 5     # a smoke run
    .venv/bin/python -m bench.pronunciation_cost --readme-limits # the attacker under the README's example limits

One real gateway (``chattts-gateway serve``, the espeak engine alone, memory stores) and two tenants: the
**bystander** sends a short new sentence every ``--interval-s`` (streamed ``pcm`` on ``POST /v1/audio/speech``) and
times its first byte; the **attacker** (``scheduling.priority: low``) has a dictionary ``a`` → a 1,024-character alias
and three dictionaries of 256 rules of 256-character graphemes each (the most a version may hold; made in 50 KB
uploads, under the 64 KiB body cap). Phases of ``--seconds`` each:

- **idle**: the bystander alone;
- **expansion**: ``--clients`` attacker clients send ``"a a a a a a a a"`` (15 characters) through the ``a``
  dictionary on ElevenLabs' route, one after another: what each is charged, and the audio per charged character;
- **plain**: the same clients send short texts without dictionaries: the load any tenant's requests put on the
  bystander, the yardstick of the phases after it;
- **combinations**: the same clients name the three big dictionaries' versions in ever new combinations (5 versions
  of each, pinned; each of them applied alone once before the phases); before issue #47 each new combination compiled
  a new automaton of all their rules;
- **new versions**: each client makes a new version of a big dictionary (``add-rules``) and speaks with it: the one
  compile a request can still cause, within the tenant's ``pronunciation.compile_characters_per_minute`` (past it,
  refused: ``429``).

Prints a Markdown table: the bystander's first-byte p50 and p90 and their ratio to idle, the attacker's requests (and
refusals) and what it was charged per request, from ``GET /v1/usage``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import random
import statistics
import string
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from auth.keys import generate_api_key, hash_api_key
from harness.gateway_process import GatewayProcess

__all__ = ["main"]

MODEL = "espeak"
ALIAS = "y" * 1024
RULES_PER_UPLOAD = 180  # 256-character graphemes: about 50 KB of JSON, under server.max_body_bytes
RULES = 256  # of 256 characters: the 65,536 grapheme characters a version may hold (RuleCaps)
VERSIONS = 5  # of each big dictionary, applied in combinations: 15 compiles, within a tenant's compile budget a minute
EXPANDED = "a a a a a a a a"
PHASES = ["plain", "expansion", "combinations", "new versions"]
README_LIMITS = {"requests_per_minute": 60, "characters_per_minute": 20000, "concurrent_streams": 4}
"""A tenant's limits in the README's example configuration: ``--readme-limits`` gives them to the attacker."""


def _grapheme(rng: random.Random) -> str:
    return "".join(rng.choices(string.ascii_letters, k=256))


class Tenant:
    def __init__(self, base_url: str, key: str) -> None:
        self.http = httpx.AsyncClient(base_url=base_url, headers={"xi-api-key": key}, timeout=60)

    async def create(self, rules: list[dict[str, Any]]) -> dict[str, Any]:
        response = await self.http.post(
            "/v1/pronunciation-dictionaries/add-from-rules", json={"name": "d", "rules": rules}
        )
        response.raise_for_status()
        return dict(response.json())

    async def add(self, dictionary: str, rules: list[dict[str, Any]]) -> str:
        response = await self.http.post(f"/v1/pronunciation-dictionaries/{dictionary}/add-rules", json={"rules": rules})
        if response.status_code != 200:
            raise RuntimeError(f"add-rules: {response.status_code} {response.text}")
        return str(response.json()["version_id"])

    async def replace_one(self, dictionary: str, rules: list[dict[str, Any]]) -> str:
        """A new version of a full dictionary: its first rule's grapheme said otherwise (a rule of a grapheme it has
        replaces it)."""
        first = (await self.http.get(f"/v1/pronunciation-dictionaries/{dictionary}")).json()
        return await self.add(dictionary, [{**rules[0], "string_to_replace": first["rules"][0]["string_to_replace"]}])

    async def speak(self, text: str, locators: list[dict[str, str]]) -> int:
        body = {"text": text, "model_id": MODEL, "pronunciation_dictionary_locators": locators}
        async with self.http.stream("POST", "/v1/text-to-speech/alloy?output_format=pcm_24000", json=body) as reply:
            await reply.aread()
            return reply.status_code

    async def charged(self) -> tuple[int, int, float]:
        usage = (await self.http.get("/v1/usage")).json()
        return int(usage["requests"]), int(usage["input_characters"]), float(usage["audio_seconds"])


def _rules(rng: random.Random, count: int) -> list[dict[str, Any]]:
    return [{"type": "alias", "string_to_replace": _grapheme(rng), "alias": "x"} for _ in range(count)]


async def _big_dictionary(attacker: Tenant, rng: random.Random) -> tuple[str, list[str]]:
    """A dictionary of :data:`RULES` rules, and its kept versions (the last ones made while filling it)."""
    created = await attacker.create(_rules(rng, RULES_PER_UPLOAD))
    versions = [str(created["version_id"])]
    count = RULES_PER_UPLOAD
    while count < RULES:
        added = min(RULES_PER_UPLOAD, RULES - count)
        versions.append(await attacker.add(created["id"], _rules(rng, added)))
        count += added
    while len(versions) < VERSIONS:  # more versions of the full size: one rule more and one fewer each
        versions.append(await attacker.replace_one(created["id"], _rules(rng, 1)))
    return str(created["id"]), versions[-VERSIONS:]


async def _bystander(base_url: str, key: str, seconds: float, interval_s: float) -> list[float]:
    """First-byte times of one short new request every ``interval_s``."""
    times: list[float] = []
    headers = {"authorization": f"Bearer {key}"}
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=30) as http:

        async def one(number: int) -> None:
            body = {
                "model": MODEL,
                "voice": "alloy",
                "input": f"Bystander sentence {number}.",
                "response_format": "pcm",
            }
            started = time.perf_counter()
            async with http.stream("POST", "/v1/audio/speech", json=body) as reply:
                async for _ in reply.aiter_bytes():
                    times.append(time.perf_counter() - started)
                    break

        tasks = []
        end = time.monotonic() + seconds
        for number in itertools.count(random.randrange(10**9)):
            if time.monotonic() >= end:
                break
            tasks.append(asyncio.create_task(one(number)))
            await asyncio.sleep(interval_s)
        await asyncio.gather(*tasks)
    return times


async def _attack(phase: str, attacker: Tenant, setup: dict[str, Any], clients: int, seconds: float) -> list[int]:
    statuses: list[int] = []
    end = time.monotonic() + seconds
    rng = random.Random(phase)

    async def client(number: int) -> None:
        while time.monotonic() < end:
            if phase == "plain":
                statuses.append(await attacker.speak(f"Plain {rng.random()}.", []))
            elif phase == "expansion":
                statuses.append(await attacker.speak(EXPANDED, [{"pronunciation_dictionary_id": setup["long"]}]))
            elif phase == "combinations":
                picked = [(d, rng.choice(versions)) for d, versions in setup["big"]]
                locators = [{"pronunciation_dictionary_id": d, "version_id": v} for d, v in picked]
                statuses.append(await attacker.speak(f"Combination {rng.random()}.", locators))
            else:
                dictionary = setup["big"][number % len(setup["big"])][0]
                version = await attacker.replace_one(dictionary, _rules(rng, 1))
                locators = [{"pronunciation_dictionary_id": dictionary, "version_id": version}]
                statuses.append(await attacker.speak(f"New version {rng.random()}.", locators))

    await asyncio.gather(*(client(number) for number in range(clients)))
    return statuses


def _percentile(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100)[q - 1] if len(values) > 1 else values[0]


async def measure(base_url: str, keys: dict[str, str], args: argparse.Namespace) -> None:
    attacker = Tenant(base_url, keys["attacker"])
    rng = random.Random(47)
    long = await attacker.create([{"type": "alias", "string_to_replace": "a", "alias": ALIAS}])
    big = [await _big_dictionary(attacker, rng) for _ in range(3)]
    setup = {"long": long["id"], "big": big}
    for dictionary, versions in big:  # every kept version applied once: compiled, where compiles are kept
        for version in versions:
            status = await attacker.speak("Warm.", [{"pronunciation_dictionary_id": dictionary, "version_id": version}])
            if status != 200:
                raise RuntimeError(f"applying {dictionary} {version}: {status}")
    print(f"{os.cpu_count()} cores; {args.seconds:g} s a phase, {args.clients} attacker clients\n")
    print("| phase | bystander first byte p50 / p90 (s) | ratio to idle p50 / p90 | attacker requests "
          "(refused) | charged per request | audio s per charged character |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    idle: tuple[float, float] | None = None
    for phase in ("idle", *args.phases):
        before = await attacker.charged()
        attack = None if phase == "idle" else _attack(phase, attacker, setup, args.clients, args.seconds)
        times, statuses = await asyncio.gather(
            _bystander(base_url, keys["bystander"], args.seconds, args.interval_s),
            attack if attack is not None else asyncio.sleep(0, []),
        )
        after = await attacker.charged()
        p50, p90 = _percentile(times, 50), _percentile(times, 90)
        idle = idle or (p50, p90)
        served = after[0] - before[0]
        charged = (after[1] - before[1]) / served if served else 0
        audio = (after[2] - before[2]) / (after[1] - before[1]) if after[1] > before[1] else 0
        refused = sum(status != 200 for status in statuses)
        print(
            f"| {phase} | {p50:.3f} / {p90:.3f} | {p50 / idle[0]:.2f} / {p90 / idle[1]:.2f} | {len(statuses)} "
            f"({refused}) | {charged:.0f} | {audio:.3f} |"
        )
    await attacker.http.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=15.0, help="length of each phase")
    parser.add_argument("--clients", type=int, default=2, help="the attacker's concurrent clients")
    parser.add_argument("--interval-s", type=float, default=0.25, help="between the bystander's requests")
    parser.add_argument("--phases", nargs="+", choices=PHASES, default=PHASES, help="the attacker's phases, after idle")
    parser.add_argument("--readme-limits", action="store_true", help="the attacker under the README's example limits")
    args = parser.parse_args()
    keys = {"attacker": generate_api_key(), "bystander": generate_api_key()}
    attacker: dict[str, Any] = {
        "name": "attacker",
        "api_key_sha256": [hash_api_key(keys["attacker"])],
        "scheduling": {"priority": "low"},
    }
    if args.readme_limits:
        attacker["limits"] = README_LIMITS
    tenants = [attacker, {"name": "bystander", "api_key_sha256": [hash_api_key(keys["bystander"])]}]
    config = {"auth": {"tenants": tenants}, "engines": {MODEL: {"kind": "espeak"}}, "aliases": {}}
    with tempfile.TemporaryDirectory() as tmp, GatewayProcess(config, Path(tmp)) as gateway:
        asyncio.run(measure(gateway.base_url, keys, args))


if __name__ == "__main__":
    main()
