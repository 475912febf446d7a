"""Built-in presets: small TOML files of inputs (ssd_sim/model/presets/*.toml) turned into Profiles.

Each file lists its sources and marks which numbers are INPUTs (measurements) and which are assumed;
this module derives everything else (latency parameters, acceptance, hit-curve scales) and records
how in Profile.provenance, so `ssd-plan --preset NAME --explain` can show the chain.
"""

from __future__ import annotations

import functools
import tomllib
from dataclasses import replace
from importlib import resources
from pathlib import Path

import numpy as np
from scipy.optimize import brentq

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.host import Host
from ssd_sim.io.limits import effective_temperature
from ssd_sim.model.acceptance import AcceptanceModel, AcceptancePoint, HitCurve, HitTable
from ssd_sim.model.architecture import load_architecture
from ssd_sim.model.hardware import get_gpu
from ssd_sim.model.latency import ForwardLatency, LatencyModel, fit_forward_latency
from ssd_sim.model.profile import Profile, load_profile_file
from ssd_sim.model.roofline import forward_latency
from ssd_sim.model.synthetic import hit_rows
from ssd_sim.model.uncertainty import Uncertainty
from ssd_sim.theory.analytic import accept_count_pmf, expected_tokens
from ssd_sim.theory.fanout import allocation_tables


def list_presets() -> list[str]:
    """Names of the built-in presets."""
    files = resources.files("ssd_sim.model") / "presets"
    return sorted(f.name.removesuffix(".toml") for f in files.iterdir() if f.name.endswith(".toml"))


def preset_source(name: str) -> dict:
    """The raw TOML inputs of a preset."""
    if name not in list_presets():
        raise ConfigError("preset", f"unknown preset {name!r}; choose one of: {', '.join(list_presets())}")
    text = (resources.files("ssd_sim.model") / "presets" / f"{name}.toml").read_text()
    return tomllib.loads(text)


def load_profile(preset: str | None = None, path: str | Path | None = None, context: int | None = None) -> Profile:
    """A profile by preset name or from a file (exactly one of the two); a preset at `context` tokens per sequence
    instead of its own (see get_preset)."""
    if (preset is None) == (path is None):
        raise ConfigError("profile", "give exactly one of --preset NAME or --profile FILE")
    return load_profile_file(path) if path is not None else get_preset(preset, context)


@functools.cache
def get_preset(name: str, context: int | None = None) -> Profile:
    """Derive the Profile of a built-in preset (cached: derivation involves small fits).

    `context` (tokens in each sequence's KV cache) replaces the preset's own: the spec terms that read the KV cache
    move with it, the measured steps keep fixing the overhead (they were taken at the preset's context)."""
    src = preset_source(name)
    if context is not None:
        if not (isinstance(context, int) and 1 <= context <= 1_048_576):
            raise ConfigError("context", f"must be an integer in 1..1048576 (tokens per sequence), got {context!r}")
        src = {**src, "context": context, "own_context": src.get("context", 1024)}
    prov: dict[str, str] = {}
    ov, interference = src.get("overheads", {}), src.get("interference", {})
    engine = src.get("engine", "ssd-runtime")
    round_overhead = float(ov.get("round_overhead_ms", 0.0))
    target = _at_context(src, "target", prov, round_overhead)
    draft = _at_context(src, "draft", prov, 0.0)
    if engine == "reference":
        prov["latency.loop"] = ("the reference engine's loop: SD runs K + 1 one-token draft forwards per round "
                                "(speculator_sync); SSD glue over K + 1 tokens then K tree steps over b x budget rows "
                                "(draft_runner); the jit backup redrafts the whole batch; the draft's q is sent each round")
    latency = LatencyModel(
        target=target,
        draft=draft,
        target_devices=int(src["target"].get("devices", 1)),
        round_overhead_ms=round_overhead,
        transfer_ms=float(ov.get("transfer_ms", 0.0)),
        lookup_ms=float(ov.get("lookup_ms", 0.0)),
        fast_backup_ms=float(ov.get("fast_backup_ms", 0.0)),
        sd_transfer=bool(ov.get("sd_transfer", False)),
        sd_extra_forward=engine == "reference",
        jit_glue_full=engine == "reference",
        verify_slowdown_one_row=float(interference.get("one_row", 0.0)),
        verify_slowdown_rows=float(interference.get("rows", 0.0)),
    )
    prov["latency.interference"] = interference.get(
        "source", "assumed 0: the draft has its own device (shared host resources are not modelled)")
    prov["overheads"] = ov.get("source", "assumed") + ": " + ", ".join(
        f"{k}={v}" for k, v in ov.items() if k != "source")
    if "acceptance_from" in src:
        other = get_preset(src["acceptance_from"])
        acceptance = other.acceptance
        prov["acceptance"] = f"assumed: taken from preset {src['acceptance_from']} (same model pair)"
    else:
        acceptance = _acceptance(src.get("acceptance", []), latency, prov)
    for check in src.get("check", []):
        _cross_check(check, latency, acceptance, prov)
    host = Host.from_dict(src["host"], "host") if "host" in src else None
    prov["host"] = (f"measured on {host.label()}" if host is not None else
                    "not host-specific: datasheets and published measurements of the setup it names")
    return Profile(
        name=src["name"],
        latency=latency,
        acceptance=acceptance,
        description=src.get("description", "") + (f"; at context {context} tokens" if context is not None else ""),
        target_model=src["target"].get("model", ""),
        draft_model=src["draft"].get("model", ""),
        hardware=src.get("hardware", ""),
        max_batch_size=int(src.get("max_batch_size", 64)),
        sources=tuple(src.get("sources", ())),
        provenance=prov,
        host=host,
        uncertainty=_uncertainty(src.get("uncertainty"), prov),
        engine=engine,
    )


def _uncertainty(sec: dict | None, prov: dict) -> Uncertainty | None:
    """An optional [uncertainty] table (model.uncertainty.Uncertainty fields) for inputs whose sources state a
    spread; without one, plan.intervals uses stated defaults."""
    if sec is None:
        prov["uncertainty"] = "assumed: defaults of plan.intervals.uncertainty_of (the sources state no spread)"
        return None
    prov["uncertainty"] = "from the preset's [uncertainty] table: " + ", ".join(f"{k}={v}" for k, v in sec.items()
                                                                                 if k != "sources")
    return Uncertainty.from_dict(sec)


def _spec_forward(sec: dict, context: float) -> tuple[ForwardLatency, float]:
    """(the terms of one model's forward that come from specs, with no fixed overhead; the roofline's own floor).

    With `arch` (a model.architecture shape): model.roofline's weights, KV reads per row at `context` tokens, FLOPs
    and all-reduce bytes per token, and its assumed launch floor. With only params_b: weights and FLOPs (the older
    form), floor 0. Without a GPU (CPU profiles): zeros. A measured step replaces the floor (`_forward`).
    """
    if "gpu" not in sec:
        return ForwardLatency(), 0.0
    gpu = get_gpu(sec["gpu"])
    if "arch" in sec:
        f = forward_latency(load_architecture(sec["arch"]), gpu, int(sec.get("devices", 1)), sec.get("dtype", "bf16"),
                            context)
        return replace(f, fixed_ms=0.0), f.fixed_ms
    return ForwardLatency.roofline(sec["params_b"], sec.get("bytes_per_param", 2), sec.get("devices", 1),
                                   gpu.hbm_tb_s, gpu.bf16_tflops, sec.get("mfu", 0.6)), 0.0


def _forward(sec: dict, role: str, prov: dict, round_overhead: float, context: float) -> ForwardLatency:
    """Derive one model's ForwardLatency from whichever inputs its section has: specs give the terms that grow
    with rows and tokens (`_spec_forward`), a measured step the fixed overhead per forward."""
    spec, floor = _spec_forward(sec, context)
    if spec.memory_ms:
        prov[f"{role}.roofline"] = (f"derived from specs: weights {spec.memory_ms:.3f} ms, KV {spec.row_ms * 1e3:.2f} "
                                    f"us per row at context {context:g}, compute "
                                    f"{spec.compute_ms_per_token * 1e3:.3f} us/token"
                                    + (f", all-reduce {spec.token_ms * 1e3:.2f} us/token" if spec.token_ms else "")
                                    + (" (model.roofline)" if "arch" in sec else ""))
    if "forwards" in sec:  # measured (rows, tokens, ms) points
        pts = sec["forwards"]
        free = tuple(sec.get("fit", ("fixed_ms", "token_ms", "token_exponent")))
        model, rep = fit_forward_latency([[(r, t, 1)] for r, t, _ in pts], [ms for _, _, ms in pts],
                                         fixed=_spec_terms(spec), free=free)
        prov[f"{role}.latency"] = (f"fitted to {len(pts)} measured forwards: R^2={rep.r2:.3f}, "
                                   f"worst error {rep.max_abs_rel_err:.1%}")
        return model
    if "ssd_step" in sec:  # measured SSD draft steps: glue over K+1 tokens + K branch steps
        st = sec["ssd_step"]
        K, f = st["K"], st["fan_out"]
        work = [[(b, K + 1, 1), (b * f * (K + 1), 1, K)] for b in st["batch"]]
        model, rep = fit_forward_latency(work, st["ms"], fixed=_spec_terms(spec))
        prov[f"{role}.latency"] = (f"fitted to SSD draft steps at b={st['batch']} (K={K}, fan-out {f}): "
                                   f"R^2={rep.r2:.3f}, worst error {rep.max_abs_rel_err:.1%}")
        return model
    if "token_ms" in sec or "token_exponent" in sec:
        spec = replace(spec, token_ms=float(sec.get("token_ms", 0.0)), token_exponent=float(sec.get("token_exponent", 1.0)))
    if "ar_tok_s" in sec or "step_ms" in sec:
        return _measured_step(sec, role, prov, round_overhead, spec)
    if "overhead_from" in sec:  # another model's measured step in the same engine (on its own GPU)
        return _borrowed_overhead(sec, role, prov, context, spec)
    if "fixed_ms" in sec or not floor:
        prov[f"{role}.latency"] = "assumed: roofline from specs plus the assumed fixed_ms / token_ms"
        return replace(spec, fixed_ms=float(sec.get("fixed_ms", 0.0)))
    prov[f"{role}.latency"] = f"assumed: roofline from specs with its own floor {floor:.2f} ms (model.roofline)"
    return replace(spec, fixed_ms=floor)


def _at_context(src: dict, role: str, prov: dict, round_overhead: float) -> ForwardLatency:
    """One model's forward at the preset's context, or at a requested one: derived at the preset's own context (where
    its measurements were taken), then with the KV term of the requested context."""
    own = float(src.get("own_context", src.get("context", 1024)))
    f = _forward(src[role], role, prov, round_overhead, own)
    want = float(src.get("context", own))
    if want == own or not f.row_ms:
        return f
    spec, _ = _spec_forward(src[role], want)
    prov[f"{role}.context"] = (f"KV reads per row and attention FLOPs at context {want:g} instead of the preset's "
                               f"{own:g} tokens (the measured overhead is kept)")
    return replace(f, row_ms=spec.row_ms, compute_ms_per_token=spec.compute_ms_per_token)


def _spec_terms(spec: ForwardLatency) -> dict:
    """The spec terms a latency fit keeps fixed."""
    return {"memory_ms": spec.memory_ms, "compute_ms_per_token": spec.compute_ms_per_token, "row_ms": spec.row_ms,
            "expert_ms": spec.expert_ms, "expert_share": spec.expert_share}


def _measured_step(sec: dict, role: str, prov: dict, round_overhead: float, spec: ForwardLatency) -> ForwardLatency:
    """A measured AR step (ar_tok_s, minus the round overhead) or forward (step_ms over step_rows rows): its part
    above the spec terms is the fixed overhead; a measured verify over verify_tokens gives the per-token slope."""
    step = 1e3 / sec["ar_tok_s"] if "ar_tok_s" in sec else float(sec["step_ms"])
    rows = int(sec.get("step_rows", 1))  # a tree step decodes several branch rows at once
    overhead = round_overhead if "ar_tok_s" in sec else 0.0
    if "verify_ms" in sec:  # two measurements: slope per token, linear (it replaces the spec's all-reduce term)
        n = float(sec["verify_tokens"])
        # the engine's verify phase (forward + acceptance) is compared with the whole AR step
        spec = replace(spec, token_ms=max((sec["verify_ms"] - step) / (n - 1.0), 0.0), token_exponent=1.0)
    fixed = step - overhead - spec(rows, 1)
    field = "ar_tok_s" if "ar_tok_s" in sec else "step_ms"
    if fixed < 0:
        raise ConfigError(f"{role}.{field}", f"measured step {step:.2f} ms is below the roofline "
                          f"{spec(rows, 1):.2f} ms: check devices / arch / gpu")
    prov[f"{role}.latency"] = (f"fixed overhead {fixed:.2f} ms per forward derived from a measured {step:.2f} ms "
                               f"step over {rows} row(s)" + _roofline_ratio(step - overhead, spec(rows, 1)))
    return replace(spec, fixed_ms=fixed)


def _borrowed_overhead(sec: dict, role: str, prov: dict, context: float, spec: ForwardLatency) -> ForwardLatency:
    """The fixed overhead of another model's measured step in the same engine (overhead_from), taken as
    model-independent (launches, attention planning, sampling)."""
    o = sec["overhead_from"]
    shape = {"arch": o["arch"]} if "arch" in o else {"params_b": o["params_b"], "mfu": sec.get("mfu", 0.6)}
    other, _ = _spec_forward({"gpu": o.get("gpu", sec["gpu"]), "dtype": sec.get("dtype", "bf16"), **shape}, context)
    rows = int(o.get("rows", 1))
    fixed = float(o["ms"]) - other(rows, 1)
    if fixed < 0:
        raise ConfigError(f"{role}.overhead_from", f"{o['ms']} ms is below that model's roofline")
    prov[f"{role}.latency"] = (f"assumed: fixed overhead {fixed:.2f} ms per forward, the non-roofline part of "
                               f"{o.get('model', 'another model')}'s measured {o['ms']} ms step over "
                               f"{rows} rows in the same engine on {o.get('gpu', sec['gpu'])} (launches, attention "
                               f"planning and sampling, taken as model-independent); forward at 1 row "
                               f"{fixed + spec(1, 1):.2f} ms = specs {spec(1, 1):.2f} + overhead")
    return replace(spec, fixed_ms=fixed)


def _roofline_ratio(measured_ms: float, roofline_ms: float) -> str:
    """A provenance clause comparing a measured forward with its roofline."""
    if roofline_ms <= 0:
        return ""
    ratio = measured_ms / roofline_ms
    verdict = ("plausible for a launch-bound small model or a tensor-parallel forward" if ratio <= ROOFLINE_PLAUSIBLE
               else "far above the roofline: check the measurement")
    return f"; {ratio:.2f}x its roofline {roofline_ms:.2f} ms ({verdict})"


ROOFLINE_PLAUSIBLE = 8.0  # a forward above this many times its roofline is flagged (small GPU models run ~2-4x)
CONFLICT_TOLERANCE = 0.25  # a reported time this far (relative) from what the derived model gives is a conflict


def check_rows(check: dict, latency: LatencyModel, acceptance: AcceptanceModel) -> list[tuple]:
    """[(b, reported ms, derived ms, T_p ms, T_v ms)] for a [[check]] entry of a preset (see _cross_check)."""
    K, f = int(check["K"]), int(check["fan_out"])
    acc = acceptance.at(float(check.get("temperature", 0.0)))
    h = float(acc.pmf(K) @ acc.primary_hit.hit(np.full(K + 1, f)))  # per-sequence hit with this uniform cache
    rows = []
    for b, ms in zip(check["batch"], check["ms"], strict=True):
        t_p = float(latency.primary_ms(b, K, f * (K + 1)))
        derived = t_p
        if check["kind"] == "ssd_step":  # the reference engine redrafts the whole batch when any row misses
            derived += latency.lookup_ms + (1.0 - h**b) * float(latency.jit_backup_ms(b, K))
        rows.append((b, ms, derived, t_p, float(latency.verify_ms(b, K))))
    return rows


def _cross_check(check: dict, latency: LatencyModel, acceptance: AcceptanceModel, prov: dict) -> None:
    """Compare a reported time the preset does not use as input with what the derived model predicts for it.

    kind "ssd_step": the reference engine's "avg draft step" (timed from the spec request to the populated cache):
    lookup + the jit backup when any row misses + glue + K tree steps. kind "primary": glue + tree steps only.
    Writes check.<name> and, beyond CONFLICT_TOLERANCE or where T_p > T_v, conflict.<name> entries.
    """
    name, K, f = check["name"], int(check["K"]), int(check["fan_out"])
    rows = check_rows(check, latency, acceptance)
    text = ", ".join(f"b={b}: {ms} vs {d:.1f} ms" for b, ms, d, _, _ in rows)
    prov[f"check.{name}"] = (f"reported {check['kind']} at K={K}, fan-out {f} ({check.get('source', 'see sources')}) "
                             f"vs this profile: {text}")
    worst = max(rows, key=lambda r: abs(r[1] / r[2] - 1.0))
    late = [r for r in rows if r[3] > r[4]]
    issues = []
    if abs(worst[1] / worst[2] - 1.0) > CONFLICT_TOLERANCE:
        issues.append(f"at b={worst[0]} the reported {worst[1]} ms is {worst[1] / worst[2]:.2f}x the derived "
                      f"{worst[2]:.1f} ms")
    if late and check.get("expect_hidden"):
        b, _, _, t_p, t_v = late[0]
        issues.append(f"the derived primary speculation T_p = {t_p:.1f} ms exceeds T_v = {t_v:.1f} ms at b={b}, so at "
                      f"K={K}, fan-out {f} this profile says the target waits for the draft"
                      + f" ({check['expect_hidden']})")
    elif late:
        prov[f"check.{name}"] += (f"; T_p = {late[0][3]:.1f} ms > T_v = {late[0][4]:.1f} ms at b={late[0][0]}, as "
                                  "the source also found")
    if issues:
        prov[f"conflict.{name}"] = "conflict: " + "; ".join(issues) + ". " + check.get("resolution", "")


def _alpha_from_sd(latency: LatencyModel, K: int, tok_s: float) -> tuple[float, float, float]:
    """The constant alpha at which SD at K, b = 1 runs tok_s (tok/s); with its round (ms) and tokens per round.

    The round's draft time depends on alpha too (P(k = K) = alpha^K prices a 2-token first draft step), so
    alpha solves E[tokens](alpha) / round_ms(alpha) = tok_s.
    """
    def round_ms(a: float) -> float:
        return float(latency.sd_verify_ms(1, K, a**K) + latency.sd_draft_ms(1, K, a**K))

    def gap(a: float) -> float:
        return expected_tokens(a, K) * 1e3 / round_ms(a) - tok_s

    lo, hi = 1e-9, 1 - 1e-9
    if not gap(lo) < 0 < gap(hi):
        want = tok_s * round_ms(hi if gap(hi) < 0 else lo) / 1e3
        raise ConfigError("acceptance.sd", f"{tok_s} tok/s needs {want:.2f} tokens/round, outside (1, K+1)")
    alpha = brentq(gap, lo, hi)
    return alpha, round_ms(alpha), tok_s * round_ms(alpha) / 1e3


def _acceptance(entries: list[dict], latency: LatencyModel, prov: dict) -> AcceptanceModel:
    """Derive acceptance points: alpha from SD throughput (or assumed), hit scale from a measured p_hit."""
    if not entries:
        raise ConfigError("acceptance", "a preset needs [[acceptance]] entries or acceptance_from")
    points, first_alpha = [], None
    for e in entries:
        T = float(e["temperature"])
        if "sd" in e:
            K, tok_s = e["sd"]["K"], e["sd"]["tok_s"]
            alpha, round_ms, want = _alpha_from_sd(latency, K, tok_s)
            steps = K + (1 if latency.sd_extra_forward else 0)
            prov[f"acceptance.T{T:g}.alpha"] = (f"derived: {alpha:.3f} reproduces SD {tok_s} tok/s at K={K} "
                                                f"({want:.2f} tokens per {round_ms:.1f} ms round: verify "
                                                f"{float(latency.verify_ms(1, K)):.1f} ms + {steps} draft forwards)")
        elif "alpha" in e:  # a value or per-position values, given directly
            alpha = e["alpha"] if isinstance(e["alpha"], list) else float(e["alpha"])
            prov[f"acceptance.T{T:g}.alpha"] = f"{e.get('source', 'assumed')}: {alpha}"
        elif "alpha_ratio" in e and first_alpha is not None:
            alpha = (np.asarray(first_alpha) * float(e["alpha_ratio"])).tolist()
            alpha = alpha if isinstance(alpha, list) else float(alpha)
            prov[f"acceptance.T{T:g}.alpha"] = f"assumed: {e['alpha_ratio']} x the first point = {alpha:.3f}"
        else:
            raise ConfigError("acceptance", f"entry at T={T} needs sd, alpha or alpha_ratio")
        first_alpha = alpha if first_alpha is None else first_alpha
        if "p_hit" in e["hit"]:
            primary, backup = _positional_hits(e["hit"], alpha, T, prov)
        else:
            primary = _hit_curve(e["hit"], T, prov, e.get("source", "assumed"))
            backup = _backup_curve(e, primary)
        src = "derived" if "sd" in e or "p_hit" in e["hit"] else e.get("source", "assumed")
        acc = tuple(float(a) for a in alpha) if isinstance(alpha, list) else (float(alpha),)
        points.append(AcceptancePoint(T, acc, primary, backup, 1.0, src))
    prov["acceptance.saguaro"] = "assumed: C response from the synthetic draft/target family (model/acceptance.py)"
    return AcceptanceModel(tuple(points))


def _hit_curve(h: dict, T: float, prov: dict, source: str = "assumed") -> HitCurve:
    """A hit curve given directly (`source`: assumed or measured), the same at every stopping position."""
    prov[f"acceptance.T{T:g}.hit"] = f"{source}: miss_at_one={h['miss_at_one']}, r={h['r']}"
    return HitCurve(float(h["miss_at_one"]), float(h["r"]))


def _backup_curve(e: dict, primary: HitCurve) -> HitCurve:
    """The curve after a fast backup: given (backup_hit), or the primary's misses x backup_miss_ratio."""
    if "backup_hit" in e:
        return HitCurve(float(e["backup_hit"]["miss_at_one"]), float(e["backup_hit"]["r"]))
    return HitCurve(min(1.0, primary.miss_at_one * float(e.get("backup_miss_ratio", 1.0))), primary.r)


def _rounded(row) -> tuple[float, ...]:
    """A hit row as profile files store it (5 decimals), so a derived preset round-trips through its JSON."""
    return tuple(round(float(v), 5) for v in row)


HIT_ROW_F = 16  # guesses per position the derived hit tables list (past it: the rows' tail power law)


def _positional_hits(h: dict, alpha, T: float, prov: dict) -> tuple[HitTable, HitTable]:
    """(primary, backup) per-position hit tables from a measured p_hit (ssd-notes: the bonus after a rejection is a
    residual sample, after all K accepted a plain target sample, two different curves).

    - all accepted (k = K): the synthetic family (model.synthetic) fitted to the mean acceptance; at T = 0 its
      hit with one guess is the acceptance itself (the bonus is the target's argmax, the guess the draft's);
    - after a rejection (k < K): miss(F) = c F^-r with r assumed and c solved so that the optimal allocation of
      the measured budget at the measured K reproduces p_hit;
    - after a fast backup the random tokens are rejected at once and the bonus is a plain target sample: the
      all-accepted row at every position.
    """
    r, K = float(h["r"]), int(h["K"])
    budget = int(h["budget_per_position"]) * (K + 1)
    mean_alpha = float(np.mean(alpha))
    fam_reject, accepted = hit_rows(round(mean_alpha, 4), effective_temperature(T), HIT_ROW_F)
    accepted = _rounded(accepted)
    pmf = accept_count_pmf(alpha, K)

    def table(c: float) -> HitTable:
        row = _rounded(HitCurve(c, r).hit(np.arange(HIT_ROW_F + 1)))
        return HitTable(reject=(row,), accepted=(accepted,))

    def gap(c: float) -> float:
        best, _ = allocation_tables(budget, pmf, table(c).miss_matrix(K, budget))
        return 1.0 - float(best[K, budget]) - float(h["p_hit"])

    lo, hi = 1e-6, 1.0
    gap_lo, gap_hi = gap(lo), gap(hi)
    if gap_hi >= 0 or gap_lo <= 0:  # the all-accepted rounds alone give more (or the best reject curve less)
        c = hi if gap_hi >= 0 else lo
        prov[f"conflict.acceptance.T{T:g}.hit"] = (f"conflict: p_hit {h['p_hit']} is not reachable with the derived "
                                                   f"all-accepted row; reject miss_at_one clamped to {c:g}")
    else:
        c = brentq(gap, lo, hi, xtol=1e-6)
    prov[f"acceptance.T{T:g}.hit"] = (
        f"derived per position: after all K accepted, hit(1..3) = {', '.join(f'{v:.3f}' for v in accepted[1:4])} from "
        f"the synthetic family fitted to acceptance {mean_alpha:.3f} (assumed shape); after a rejection "
        f"miss(F) = {c:.3f} F^-{r:g} (r assumed, miss_at_one solved so the optimal fan-out of budget {budget} at K={K} "
        f"reproduces p_hit {h['p_hit']}; the family alone would give hit(1) = {fam_reject[1]:.3f}); after a fast "
        "backup, the all-accepted row")
    return table(c), HitTable(reject=(accepted,), accepted=(accepted,))
