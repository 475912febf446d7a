"""Engine metrics -> per-position acceptance counts: vLLM's Prometheus counters, SGLang's log, the reference engine's
METRICS dict; malformed files are one-line errors."""

import json

import pytest

from ssd_sim.io.engine_metrics import read_engine_metrics
from ssd_sim.io.errors import ConfigError

VLLM = """# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 600.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 400.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 500.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="0"} 300.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 600.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 420.0
vllm:spec_decode_num_accepted_tokens_per_pos_created{engine="0",model_name="m",position="2"} 1.7e9
"""
SGLANG = """[2026-11-30 10:00:01] Decode batch. #running-req: 4, #token: 900, token usage: 0.01, accept len: 3.00, gen throughput (token/s): 400.1, #queue-req: 0
[2026-11-30 10:00:11] Decode batch. #running-req: 4, #token: 950, token usage: 0.01, accept len: 2.50, accept rate: 0.50, gen throughput (token/s): 380.0, #queue-req: 0
"""


def write(tmp_path, name, text):
    (tmp_path / name).write_text(text)
    return tmp_path / name


def test_vllm_counters_sum_over_engines_and_give_counted_per_position_acceptance(tmp_path):
    c = read_engine_metrics(write(tmp_path, "m.txt", VLLM), "vllm")
    # drafts 1000; accepted >= 1: 800, >= 2: 600, >= 3: 420 -> conditional 0.8, 0.75, 0.7
    assert c.rounds == 1000 and c.tried == (1000.0, 800.0, 600.0)
    assert c.acceptance == pytest.approx((0.8, 0.75, 0.7))
    assert c.mean_accepted == pytest.approx(1.82)
    assert any("temperature" in a for a in c.assumed)


def test_vllm_get_metrics_dumped_as_json_reads_as_its_prometheus_text(tmp_path):
    metrics = [{"name": "vllm:spec_decode_num_drafts", "value": 1000},
               {"name": "vllm:spec_decode_num_accepted_tokens_per_pos", "values": [800, 600, 420]},
               {"name": "vllm:num_requests_running", "value": 0}]
    c = read_engine_metrics(write(tmp_path, "m.json", json.dumps(metrics)), "vllm")
    assert c.tried == (1000.0, 800.0, 600.0) and c.acceptance == pytest.approx((0.8, 0.75, 0.7))


VLLM_V0 = """vllm:spec_decode_draft_acceptance_rate{model_name="m"} 0.6
vllm:spec_decode_num_accepted_tokens_total{model_name="m"} 1200.0
vllm:spec_decode_num_draft_tokens_total{model_name="m"} 2000.0
vllm:spec_decode_num_emitted_tokens_total{model_name="m"} 1500.0
"""


def test_vllm_counters_of_totals_only_give_a_constant_rate_with_their_mean(tmp_path):
    c = read_engine_metrics(write(tmp_path, "v0.txt", VLLM_V0), "vllm", k=4)
    a = c.acceptance[0]  # 500 drafts of 4 tokens, 2.4 accepted per draft
    assert c.rounds == 500 and c.acceptance == pytest.approx((a,) * 4)
    assert a + a**2 + a**3 + a**4 == pytest.approx(2.4, abs=1e-6) and c.mean_accepted == pytest.approx(2.4)
    assert any(x.startswith("per-position acceptance (a constant rate") for x in c.assumed)
    # V1 before per-position counters: the drafts count says K
    v1 = VLLM_V0 + 'vllm:spec_decode_num_drafts_total{model_name="m"} 500.0\n'
    assert read_engine_metrics(write(tmp_path, "v1.txt", v1), "vllm").acceptance == pytest.approx(c.acceptance)


VLLM_LOG = """INFO 11-30 10:00:01 [metrics.py:86] SpecDecoding metrics: Mean acceptance length: 2.80, Accepted throughput: 90.00 tokens/s, Drafted throughput: 150.00 tokens/s, Accepted: 900 tokens, Drafted: 1500 tokens, Per-position acceptance rate: 0.800, 0.600, 0.400, Avg Draft acceptance rate: 60.0%
INFO 11-30 10:00:11 [loggers.py:118] Engine 000: Avg prompt throughput: 0.0 tokens/s, Avg generation throughput: 95.1 tokens/s
INFO 11-30 10:00:11 [metrics.py:86] SpecDecoding metrics: Mean acceptance length: 1.90, Accepted throughput: 0.00 tokens/s, Drafted throughput: 0.00 tokens/s, Accepted: 0 tokens, Drafted: 0 tokens, Per-position acceptance rate: nan, nan, nan, Avg Draft acceptance rate: nan%
INFO 11-30 10:00:21 [metrics.py:86] SpecDecoding metrics: Mean acceptance length: 2.20, Accepted throughput: 36.00 tokens/s, Drafted throughput: 90.00 tokens/s, Accepted: 360 tokens, Drafted: 900 tokens, Per-position acceptance rate: 0.600, 0.400, 0.200, Avg Draft acceptance rate: 40.0%
"""


def test_vllm_log_lines_count_per_position_over_intervals_and_keep_their_spread(tmp_path):
    c = read_engine_metrics(write(tmp_path, "serve.log", VLLM_LOG), "vllm")
    # 500 + 300 drafts; reached position 2: 400 + 180, position 3: 300 + 120; accepted it: 300 + 120, 200 + 60
    assert c.rounds == 800 and c.tried == pytest.approx((800.0, 580.0, 420.0))
    assert c.passed == pytest.approx((580.0, 420.0, 260.0)) and c.mean_accepted == pytest.approx(1260 / 800)
    assert c.spread is not None and c.spread > 0.5  # two intervals of 1.8 and 1.2 accepted per draft
    assert not any("per-position" in a for a in c.assumed)


def test_sglang_accept_len_gives_the_constant_rate_with_that_mean(tmp_path):
    c = read_engine_metrics(write(tmp_path, "s.log", SGLANG), "sglang", k=3)
    a = c.acceptance[0]
    assert c.acceptance == pytest.approx((a, a, a)) and a + a**2 + a**3 == pytest.approx(2.75 - 1.0, abs=1e-6)
    assert c.rounds == 2 and c.spread is not None and c.spread > 0


def test_reference_metrics_count_positions_and_keep_the_measured_p_hit(tmp_path):
    lens = [1, 2, 3, 4, 4, 2]  # k + 1 per sequence-step, K = 3: accepted 0, 1, 2, 3, 3, 1
    path = write(tmp_path, "r.json", json.dumps({"accepted_suffix_lens_with_recovery": lens, "cache_hits": [1.0, 0.5]}))
    c = read_engine_metrics(path, "reference")
    assert c.tried == (6.0, 5.0, 3.0) and c.passed == (5.0, 3.0, 2.0)
    assert c.p_hit == 0.75
    assert any(a.startswith("K = 3, the longest accepted run") for a in c.assumed)  # inferred, and said so
    assert not any(a.startswith("K = ") for a in read_engine_metrics(path, "reference", 3).assumed)


@pytest.mark.parametrize("engine,text,k,needle", [
    ("vllm", "vllm:num_requests_running 3\n", None, "no vllm:spec_decode_num_drafts"),
    ("vllm", 'vllm:spec_decode_num_drafts_total{engine="0"} nan\n', None, "finite"),
    ("vllm", VLLM, 2, "not K = 2: drop -k or give 3"),
    ("vllm", VLLM_V0, None, "give -k"),
    ("vllm", VLLM_LOG, 2, "not K = 2"),
    ("vllm", VLLM_LOG.replace("0.600, 0.400, 0.200", "0.600, 0.700, 0.200"), None, "falling shares"),
    ("vllm", "INFO SpecDecoding metrics: Draft acceptance rate: 0.6\n", None, "scrape /metrics instead"),
    ("vllm", VLLM_V0, 3, "is -k right?"),
    ("vllm", '[{"name": "vllm:spec_decode_num_drafts", "value": 1}', None, "not JSON"),
    ("sglang", SGLANG, None, "give -k"),
    ("sglang", SGLANG, 1, "outside 1..K + 1"),
    ("sglang", "nothing here\n", 3, "accept len"),
    ("reference", "{not json", None, "not JSON"),
    ("reference", json.dumps({"accepted_suffix_lens_with_recovery": [0, 2]}), None, "integers >= 1"),
    ("reference", json.dumps({"accepted_suffix_lens_with_recovery": [1, 5]}), 2, "K = 2"),
    ("reference", json.dumps({"accepted_suffix_lens_with_recovery": [1, 99]}), None,
     "K is read as the longest accepted run, 98 tokens, which is not a K in 1..64; give the run's K"),
    ("reference", json.dumps({"accepted_suffix_lens_with_recovery": [1, 1]}), None, "longest accepted run, 0 tokens"),
])
def test_malformed_metrics_are_one_line_errors(tmp_path, engine, text, k, needle):
    with pytest.raises(ConfigError) as e:
        read_engine_metrics(write(tmp_path, "bad", text), engine, k)
    assert needle in str(e.value) and "\n" not in str(e.value)


_PROM = "".join(f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{position="{i}"}} {n}\n' for i, n in
                enumerate((800.0, 600.0, 420.0))) + "vllm:spec_decode_num_drafts_total 1000.0\n"


@pytest.mark.parametrize("edit,message", [
    (lambda t: t.replace("} 800.0", "} 8000.0"), "8000 tokens accepted at position 0, more than the 1000 drafts"),
    (lambda t: t.replace("} 420.0", "} 700.0"), "700 tokens accepted at position 2, more than the 600 accepted at "
                                                "position 1"),
    (lambda t: t.replace('position="1"', 'position="5"'), "has positions up to 5 but not position 1"),
])
def test_vllm_counters_that_cannot_happen_are_one_line(tmp_path, edit, message):
    """More accepted than reached, or a skipped position: a math domain error in the interval before."""
    path = tmp_path / "m.txt"
    path.write_text(_PROM)
    assert read_engine_metrics(path, "vllm").acceptance == (0.8, 0.75, 0.7)
    path.write_text(edit(_PROM))
    with pytest.raises(ConfigError, match="^metrics: .*" + message.replace("(", r"\(")):
        read_engine_metrics(path, "vllm")
