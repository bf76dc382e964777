"""Request profiles: how long prompts and outputs are, in tokens, as mean ± standard deviation.

The served model's tokenizer is unknown to the client, so a prompt of *n* tokens is approximated by
*n* words drawn from a list of short, common English words; most BPE/SentencePiece tokenizers encode
each of them (with its leading space) as one token. The server's ``usage.prompt_tokens`` reports
the real count, which the metrics keep next to the target.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from raylift.errors import RayliftValueError

# Short, frequent words: one token each in the Llama, Mistral, GPT-2 and Qwen vocabularies.
WORDS: tuple[str, ...] = tuple(
    """the of and to in is was for on are with as at be by this from or have an they which one you
    were all we when your can there use each she do how their if will up other about out many then them
    these so some her would make like him into time has look two more write go see number no way could
    people my than first water been call who oil its now find long down day did get come made may part
    over new sound take only little work know place year live me back give most very after thing our
    just name good man think say great where help through much before line right too mean old any same
    tell boy follow came want show also around form three small set put end does another well large
    must big even such because turn here why ask went men read need land different home us move try kind
    hand picture again change off play spell air away animal house point page letter mother answer found
    study still learn should world high every near add food between own below country plant last school
    father keep tree never start city earth eye light thought head under story saw left few while along
    might close something seem next hard open example begin life always those both paper together got
    group often run important until children side feet car mile night walk white sea began grow took
    river four carry state once book hear stop without second later miss idea enough eat face watch far
    real almost let above girl sometimes mountain cut young talk soon list song being leave family""".split()
)


@dataclass(frozen=True)
class RequestProfile:
    """Token-length distribution of the requests (normal, clipped at ``min_tokens``), and the RNG seed.

    Mirrors llmperf's ``--mean-input-tokens/--stddev-input-tokens/--mean-output-tokens/
    --stddev-output-tokens``.
    """

    name: str
    mean_input_tokens: int
    stddev_input_tokens: int
    mean_output_tokens: int
    stddev_output_tokens: int
    seed: int = 0
    min_tokens: int = 1

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name != "name" and (not isinstance(value, int) or value < 0):
                raise RayliftValueError(
                    f"profile {self.name!r}: {f.name}={value!r} must be a non-negative integer"
                )
        if self.mean_input_tokens < 1 or self.mean_output_tokens < 1:
            raise RayliftValueError(
                f"profile {self.name!r}: mean input and output tokens must be at least 1"
            )

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class RequestSpec:
    """One request to send: the prompt, its target input length and the exact output length asked for;
    ``prompt_tokens`` is the served tokenizer's count of the prompt once sized by it
    (:mod:`raylift.measure.prompt_sizing`), None for word prompts."""

    prompt: str
    input_tokens: int
    output_tokens: int
    prompt_tokens: int | None = None


PROFILES: dict[str, RequestProfile] = {
    "smoke": RequestProfile("smoke", 32, 4, 16, 2),
    "short": RequestProfile("short", 128, 16, 64, 8),
    # The Inferentia2 llmperf run of seed 004 (Llama-2-13B, TP=8).
    "llmperf-inf2": RequestProfile("llmperf-inf2", 3072, 200, 512, 20),
}


def get_profile(profile: str | Mapping[str, Any] | RequestProfile) -> RequestProfile:
    """A named profile, or one built from a dict with :class:`RequestProfile`'s fields."""
    if isinstance(profile, RequestProfile):
        return profile
    if isinstance(profile, str):
        try:
            return PROFILES[profile]
        except KeyError:
            raise RayliftValueError(
                f"unknown benchmark profile {profile!r}; use one of {sorted(PROFILES)} or a dict with "
                "mean_input_tokens, stddev_input_tokens, mean_output_tokens, stddev_output_tokens"
            ) from None
    allowed = {f.name for f in fields(RequestProfile)}
    unknown = set(profile) - allowed
    if unknown:
        raise RayliftValueError(f"benchmark profile has unknown keys {sorted(unknown)}; allowed: {sorted(allowed)}")
    values = {"name": "custom", "stddev_input_tokens": 0, "stddev_output_tokens": 0, **profile}
    try:
        return RequestProfile(**values)
    except TypeError as exc:
        raise RayliftValueError(f"benchmark profile {dict(profile)!r} is incomplete: {exc}") from None


def _draw(rng: random.Random, mean: int, stddev: int, floor: int) -> int:
    return max(floor, round(rng.gauss(mean, stddev))) if stddev else max(floor, mean)


def make_prompt(rng: random.Random, n_tokens: int) -> str:
    """About ``n_tokens`` tokens of random words (one word ≈ one token; see the module docstring)."""
    return " ".join(rng.choices(WORDS, k=n_tokens))


def generate_requests(profile: RequestProfile, count: int, *, seed_offset: int = 0) -> list[RequestSpec]:
    """``count`` request specs, the same for the same profile, seed and offset."""
    rng = random.Random(profile.seed * 1_000_003 + seed_offset)
    specs = []
    for _ in range(count):
        n_in = _draw(rng, profile.mean_input_tokens, profile.stddev_input_tokens, profile.min_tokens)
        n_out = _draw(rng, profile.mean_output_tokens, profile.stddev_output_tokens, profile.min_tokens)
        specs.append(RequestSpec(make_prompt(rng, n_in), n_in, n_out))
    return specs
