"""Cases of the diagnosis corpus written in session 15 as hold-out probes, in a domain the others do not use
(a public library's reference desk): a credential minted per request (a JWT mid-system, a bearer token at the
top), value kinds not planted before (a ULID, a bare clock time, a W3C traceparent in a developer message),
and an app that sends only the last four messages of a conversation (a sliding window that drops the member
number given at the start), with no session named, inside ``llmtrace.session``, and under foreign
instrumentations; retrieved notes in bare ``<note>`` tags. Each with its clean twin: the same token on every call, no value, the whole history.
Three of them were missed before this session's fixes (the JWT, the window with no session, the bare tags).
"""

from __future__ import annotations

import base64
import contextlib
import random
import string
from typing import Any

from diagnosis_corpus_common import Case, Ctx
from diagnosis_corpus_variants import _foreign

LIB = ("You are the reference assistant of the Ashgrove public library. Help members find books, renew loans, "
       "and book study rooms. Never reveal another member's borrowing history. Fines are waived for members "
       "over seventy. If asked about lost items, point to the lost-property desk on floor two. Answer in two "
       "sentences at most and always offer one follow-up suggestion. ")
ASKS = ["Can I renew 'The Salt Road' again?", "Is room 4 free at noon?", "Where do I return a damaged DVD?",
        "Do you have large-print Agatha Christie?", "How much is my fine for three days?",
        "Can my son get a card at nine?", "Is the cafe open on Sunday?", "Who runs the chess club?"]
CACHE = ("cache.prefix_match", "intake.system_prompt")
FORGETS = ("loop.compaction", "intake.context_ordering")
_FIXED_SIG = "c2lnbmF0dXJlLW9mLXRoZS1maXhlZC10b2tlbi12YWx1ZQ"


def _ask(c: Ctx, system: str, user: str) -> None:
    c.ask([{"role": "system", "content": system}, {"role": "user", "content": user}])


def _jwt(rng: random.Random, twin: bool, i: int) -> str:
    sig = _FIXED_SIG if twin else base64.urlsafe_b64encode(rng.randbytes(32)).decode().rstrip("=")
    claims = base64.urlsafe_b64encode(f'{{"sub":"desk","iat":{1764500000 + (0 if twin else 61 * i)}}}'.encode())
    return f"eyJhbGciOiJIUzI1NiJ9.{claims.decode().rstrip('=')}.{sig}"


def jwt_mid(c: Ctx, twin: bool) -> None:
    """A session JWT on a line of its own mid-system: minted per request (the twin: one token every call)."""
    for i in range(8):
        _ask(c, LIB + f"Session credential: {_jwt(c.rng, twin, i)}\n" + LIB + LIB, ASKS[i])


def bearer_top(c: Ctx, twin: bool) -> None:
    alphabet = string.ascii_letters + string.digits
    fixed = "".join(random.Random(3).choice(alphabet) for _ in range(40))
    for i in range(8):
        tok = fixed if twin else "".join(c.rng.choice(alphabet) for _ in range(40))
        _ask(c, f"Upstream auth: Bearer {tok}\n" + LIB * 3, ASKS[i])


def ulid_top(c: Ctx, twin: bool) -> None:
    for i in range(8):
        ulid = "01J" + "".join(c.rng.choice("0123456789ABCDEFGHJKMNPQRSTVWXYZ") for _ in range(23))
        _ask(c, ("" if twin else f"Conversation {ulid}. ") + LIB * 3, ASKS[i])


def time_only_top(c: Ctx, twin: bool) -> None:
    for i in range(8):
        head = "" if twin else f"[{9 + i // 4:02d}:{(7 * i) % 60:02d}:{(13 * i) % 60:02d}] "
        _ask(c, head + LIB * 3, ASKS[i])


def traceparent_developer(c: Ctx, twin: bool) -> None:
    """A traceparent header pasted into a developer message ahead of a fixed history."""
    hist = [{"role": "user", "content": "I lost my card yesterday."}, {"role": "assistant", "content": LIB},
            {"role": "user", "content": "Thanks. Also, my address changed."}, {"role": "assistant", "content": LIB}]
    for i in range(8):
        tp = f" traceparent: 00-{c.rng.getrandbits(128):032x}-{c.rng.getrandbits(64):016x}-01"
        c.ask([{"role": "system", "content": LIB}, {"role": "developer", "content": "Context follows." + ("" if twin else tp)},
               *hist, {"role": "user", "content": ASKS[i]}])


_TURNS = [("My membership number is AM-48210 and I'm Priya Raman.", "Thanks Priya, found you."),
          ("I borrowed 'Tidewater', copy barcode 3900177.", "Yes, that loan is on file."),
          ("The cover was already torn when I got it.", "Noted, I've added a remark."),
          ("Can I still renew it?", "One renewal is left."), ("And the fine so far?", "Nothing yet."),
          ("Is the branch open late on Thursday?", "Until eight."),
          ("What was my membership number again?", "Let me check.")]


def _window(twin: bool, n: int) -> list[list[dict[str, Any]]]:
    """One conversation's requests: the last four messages only (the twin: the whole history)."""
    out, hist = [], []
    for q, a in _TURNS:
        hist.append({"role": "user", "content": q.replace("48210", str(48210 + 7 * n))})
        out.append([{"role": "system", "content": LIB}, *(hist if twin else hist[-4:])])
        hist.append({"role": "assistant", "content": a})
    return out


def window_chat(c: Ctx, twin: bool) -> None:
    for n in range(3):
        for msgs in _window(twin, n):
            c.ask(msgs)


def window_chat_session(c: Ctx, twin: bool) -> None:
    import llmtrace

    for n in range(3):
        with llmtrace.session(f"desk-{n}") if n else contextlib.nullcontext():
            for msgs in _window(twin, n):
                c.ask(msgs)


LIBDOCS = ["Members may borrow up to twelve items at once; DVDs count as two items and go back after one week.",
           "Study rooms on floor three seat six people and can be booked up to seven days ahead at the front desk.",
           "Overdue fines are twenty pence a day for adults, capped at five pounds for each item borrowed.",
           "The local history room holds parish records from 1780 onwards; handling them needs a reader's ticket.",
           "Printing costs ten pence a page in black and white and forty pence in colour, paid at the kiosk."]
LIBSYS = ("You are the Ashgrove library help assistant. Answer the member using the library notes supplied with "
          "each question and say which note you used. Keep it to two sentences.")


def notes_in_bare_tags(c: Ctx, twin: bool) -> None:
    """Three notes a search picked, each in ``<note>`` tags with no id and no line naming them (the twin's
    tags carry an id and a source)."""
    for i in range(6):
        notes = "\n".join(f'<note id="ln-{30 + k}" source="handbook p.{4 + k}">{LIBDOCS[k]}</note>' if twin
                          else f"<note>{LIBDOCS[k]}</note>" for k in ((i + j) % 5 for j in range(3)))
        c.ask([{"role": "system", "content": LIBSYS}, {"role": "user", "content": f"{ASKS[i]}\n\n{notes}"}])


def f_window(twin: bool, rng: random.Random) -> list[dict[str, Any]]:
    return [{"messages": m, "max_tokens": 6, "stream": False} for n in range(2) for m in _window(twin, n)]


def f_jwt(twin: bool, rng: random.Random) -> list[dict[str, Any]]:
    return [{"messages": [{"role": "system", "content": LIB + f"Upstream credential: {_jwt(rng, twin, i)}\n" + LIB + LIB},
                          {"role": "user", "content": ASKS[i]}], "max_tokens": 6, "stream": False} for i in range(8)]


HOLDOUT_CASES: tuple[Case, ...] = (
    Case("jwt_mid_system", jwt_mid, CACHE),
    Case("bearer_token_top", bearer_top, CACHE),
    Case("ulid_top_of_system", ulid_top, CACHE),
    Case("clock_time_only_top", time_only_top, CACHE),
    Case("traceparent_in_developer", traceparent_developer, CACHE),
    Case("window_of_four_messages", window_chat, FORGETS),
    Case("window_of_four_in_sessions", window_chat_session, FORGETS),
    Case("notes_in_bare_tags", notes_in_bare_tags, ("intake.evidence_formatting",)),
)
HOLDOUT_FOREIGN_CASES: tuple[Case, ...] = (
    _foreign("openllmetry_window_of_four", "openllmetry", f_window, FORGETS),
    _foreign("litellm_window_of_four", "litellm", f_window, FORGETS),
    _foreign("openinference_jwt_mid_system", "openinference", f_jwt, CACHE),
)
