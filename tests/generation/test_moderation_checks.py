"""Streaming moderation through the generation pipeline: the text is checked every ``every_tokens`` tokens
and once more at the end, and only then (the text so far is built for the steps that check, not for every
token); each check sees exactly what was emitted so far, and the cut lands on the first check that sees a
listed word, with its lag, shown and retracted characters on safety.moderation."""

from __future__ import annotations

import time

import pytest

from llmtrace.backend.generation.moderation import ModerationPolicy, StreamingModeration
from llmtrace.backend.generation.params import SamplingParams
from llmtrace.backend.generation.pipeline import GenerationPipeline

TEXT = ("The depot confirmed the damage to the second pallet this morning, so a full refund goes out on "
        "Friday and the driver brings the replacement crates next week.")


def _drive(pipe: GenerationPipeline, tokenizer, words: tuple[str, ...], every: int,  # noqa: ANN001
           monkeypatch: pytest.MonkeyPatch) -> tuple[list[tuple[int, str, str]], object, int]:
    """Feed TEXT's tokens; returns (tokens accepted, text checked, text emitted) per check, the state and
    the number of tokens fed."""
    checks: list[tuple[int, str, str]] = []
    fed = 0
    emitted: list[str] = []
    real_check = StreamingModeration.check

    def check(self: StreamingModeration, text: str) -> bool:
        checks.append((fed, text, "".join(emitted)))
        return real_check(self, text)

    monkeypatch.setattr(StreamingModeration, "check", check)
    ids = tokenizer.encode(TEXT)
    params = SamplingParams(temperature=0.0, max_tokens=len(ids), ignore_eos=True,
                            moderation=ModerationPolicy(words, every_tokens=every))
    st = pipe.new_state(params, tokenizer.encode("Status?"))
    for tok in ids:
        fed += 1
        res = pipe.accept(st, tok, time.time_ns())
        emitted.append(res.text_delta)
        if res.finished:
            break
    return checks, st, fed


def test_checks_only_every_n_tokens_and_at_the_end(pipe: GenerationPipeline, tokenizer,  # noqa: ANN001
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    checks, st, fed = _drive(pipe, tokenizer, ("solicitor",), 5, monkeypatch)
    assert st.finish_reason == "length" and fed == len(tokenizer.encode(TEXT))  # type: ignore[attr-defined]
    at = [n for n, _, _ in checks]
    periodic = list(range(5, fed + 1, 5))
    # the end's check covers the tokens the periodic one did not (none left when fed is a multiple of 5)
    assert at == (periodic + [fed] if fed % 5 else periodic), (at, fed)
    for _, checked, shown_before in checks:
        assert shown_before in TEXT and checked.startswith(shown_before) and TEXT.startswith(checked)
    assert checks[-1][1] == TEXT
    values = pipe.stage_values(st)["safety.moderation"]  # type: ignore[arg-type]
    assert values["llmtrace.moderation.checks"] == len(checks) and values["llmtrace.moderation.aborted"] is False
    assert values["llmtrace.moderation.shown_chars"] == len(TEXT)


def test_the_cut_lands_on_the_first_check_that_sees_the_word(pipe: GenerationPipeline, tokenizer,  # noqa: ANN001
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    checks, st, fed = _drive(pipe, tokenizer, ("refund",), 4, monkeypatch)
    assert st.finish_reason == "content_filter"  # type: ignore[attr-defined]
    assert fed % 4 == 0 and [n for n, _, _ in checks] == list(range(4, fed + 1, 4))
    hits = [i for i, (_, text, _) in enumerate(checks) if "refund" in text]
    assert hits == [len(checks) - 1], hits  # the first check that saw it cut the stream
    cut_text = checks[-1][1]
    values = pipe.stage_values(st)["safety.moderation"]  # type: ignore[arg-type]
    assert values["llmtrace.moderation.aborted"] is True and values["llmtrace.moderation.lag_tokens"] == 4
    assert values["llmtrace.moderation.retracted_chars"] == values["llmtrace.moderation.shown_chars"] == len(cut_text)


def test_a_check_scans_only_the_new_text_and_still_sees_a_word_across_checks() -> None:
    """Each check searches from a word's length before what the last one saw: a word split across two
    checks is still found, a listed word inside a longer one still is not ("prefund"), case aside."""
    mod = StreamingModeration(ModerationPolicy(("refund", "full credit"), every_tokens=1))
    assert not mod.check("The depot said a ref")
    assert mod.check("The depot said a ReFund")  # straddles the two checks
    mod = StreamingModeration(ModerationPolicy(("refund",), every_tokens=1))
    assert not mod.check("the p")
    assert not mod.check("the prefund")  # begins after the last check's end, but inside a word
    assert not mod.check("the prefund and full")
    assert mod.check("the prefund and full refund")
    mod = StreamingModeration(ModerationPolicy(("full credit",), every_tokens=1))
    assert not mod.check("a full")
    assert mod.check("a full credit")
