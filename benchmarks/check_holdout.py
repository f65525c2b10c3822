"""Hold-out probes of ``llmtrace check`` (issue 35's gate that can abstain), through public faces only: a
``llmtrace serve --model tiny`` process, the Anthropic SDK wrapped by ``instrument()`` (its own deploys), and
apps under OpenInference and LiteLLM's ``otel`` callback exporting to ``llmtrace collect`` (the deploy as the
resource's ``service.version``, from ``OTEL_RESOURCE_ATTRIBUTES``). Each probe is two deploys of one service,
then ``llmtrace check --deploy v2 --baseline-deploy v1`` as a subprocess; its exit status is compared with the
one the probe expects: 1 a real regression (a timestamp at the top of the system prompt on every call), 0 the
clean twin (the same prompt), 3 a run too short to tell (a reworded prompt in three calls: one cold call).

    python benchmarks/check_holdout.py [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from diagnosis import LLMTRACE, Collector, Server  # noqa: E402

DESK = ("You answer for the Marlow ferry desk. Give sailing times from the timetable, say which pier a ferry leaves "
        "from, never promise a refund for weather, and send anything about lost luggage to the harbour office. ") * 3
ASKS = ["When is the next ferry to Arden?", "Which pier for the 9:40?", "Is the night boat running?",
        "Can I bring a bike?", "Where is lost luggage?", "Do children travel free?"]


@dataclass(frozen=True)
class Probe:
    id: str
    via: str  # anthropic (the SDK), openinference, litellm
    v2: str  # same, clock, reworded
    calls_v2: int
    expect: int  # check's exit status


PROBES = (
    Probe("anthropic_clock_regression", "anthropic", "clock", 6, 1),
    Probe("anthropic_same_prompt", "anthropic", "same", 6, 0),
    Probe("anthropic_reworded_three_calls", "anthropic", "reworded", 3, 3),
    Probe("openinference_clock_regression", "openinference", "clock", 6, 1),
    Probe("openinference_same_prompt", "openinference", "same", 6, 0),
    Probe("openinference_reworded_three_calls", "openinference", "reworded", 3, 3),
    Probe("litellm_clock_regression", "litellm", "clock", 6, 1),
    Probe("litellm_same_prompt", "litellm", "same", 6, 0),
)


def _system(kind: str, i: int, desk: str) -> str:
    """The probe's system prompt: its own desk (``desk`` names it), so no probe finds another's prompt cached on the
    shared server and each deploy's first call is as cold as a fresh service's."""
    own = DESK.replace("Marlow", desk)
    if kind == "clock":
        return f"Time now: {time.strftime('%H:%M:%S')}.{time.time_ns() % 10**9:09d}. " + own
    return own.replace("Give sailing times", "Quote sailing times") if kind == "reworded" else own


def _anthropic(srv: Server, service: str, deploy: str, kind: str, n: int) -> None:
    import anthropic

    import llmtrace
    from llmtrace.adapters import instrument

    llmtrace.init(db=srv.db, service_name=service, capture="hashes", deploy=deploy)
    try:
        a = instrument(anthropic.Anthropic(base_url=srv.url, api_key="unused", max_retries=0))
        for i in range(n):
            a.messages.create(model=srv.model(), max_tokens=4, system=_system(kind, i, service), extra_body={"temperature": 0},
                              messages=[{"role": "user", "content": ASKS[i % len(ASKS)]}])
    finally:
        llmtrace.shutdown()


def _foreign(p: Probe, srv: Server, col: Collector, service: str, deploy: str, kind: str, n: int, work: Path) -> None:
    calls: list[dict[str, Any]] = [{"messages": [{"role": "system", "content": _system(kind, i, service)},
                                                 {"role": "user", "content": ASKS[i % len(ASKS)]}],
                                    "max_tokens": 4, "stream": False} for i in range(n)]
    spec = work / f"{service}-{deploy}.json"
    spec.write_text(json.dumps({"model": srv.model(), "calls": calls}))
    env = {**os.environ, "OTEL_RESOURCE_ATTRIBUTES": f"service.version={deploy}"}
    out = subprocess.run([sys.executable, str(Path(__file__).resolve().parent / "diagnosis_foreign.py"), p.via,
                          str(spec), col.endpoint, srv.url + "/v1", service], capture_output=True, text=True,
                         timeout=300, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{service}: the {p.via} app failed:\n{out.stderr[-2000:]}")


def _wait_passes(db: Path, service: str, n: int) -> None:
    from llmtrace.tracer.storage.store import read_connection

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with read_connection(db, timeout_s=5) as conn:
                got = conn.execute("SELECT count(*) FROM passes WHERE service = ?", [service]).fetchone()
            if got and int(got[0]) >= n:
                return
        except Exception:  # noqa: BLE001  (the views exist after the first write)
            pass
        time.sleep(0.5)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", help="keep the stores in this directory")
    args = ap.parse_args()
    work = Path(args.keep or tempfile.mkdtemp(prefix="llmtrace-check-holdout-"))
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("LLMTRACE_STRICT", "0")
    srv = Server("default", work).wait()
    col = Collector("hashes", work).wait()
    rows = []
    try:
        for p in PROBES:
            service = f"check-{p.id}"
            for deploy, kind, n in (("v1", "same", 6), ("v2", p.v2, p.calls_v2)):
                if p.via == "anthropic":
                    _anthropic(srv, service, deploy, kind, n)
                else:
                    _foreign(p, srv, col, service, deploy, kind, n, work)
            db = srv.db if p.via == "anthropic" else col.db
            _wait_passes(db, service, 6 + p.calls_v2)
            time.sleep(1.0)
            out = subprocess.run([*LLMTRACE, "check", "--db", str(db), "--service", service, "--deploy", "v2",
                                  "--baseline-deploy", "v1"], capture_output=True, text=True, timeout=300)
            verdicts = [ln.strip() for ln in out.stdout.splitlines() if ln.strip()][:6]
            rows.append({"probe": p.id, "via": p.via, "expect": p.expect, "exit": out.returncode,
                         "ok": out.returncode == p.expect, "report": verdicts})
            print(f"{p.id:<36} expect {p.expect} got {out.returncode} {'ok' if out.returncode == p.expect else 'WRONG'}",
                  flush=True)
    finally:
        srv.stop()
        col.stop()
    (work / "check_holdout.json").write_text(json.dumps(rows, indent=1))
    print({"probes": len(rows), "right": sum(r["ok"] for r in rows), "load_average_1m": round(os.getloadavg()[0], 2)})


if __name__ == "__main__":
    main()
