"""ssd_sim.io.host: this host read from /proc text, the comparison of two hosts, and the one-line warning."""

from __future__ import annotations

from dataclasses import replace

import pytest

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.host import Host, current_host, guest_note, host_differences, host_warning, isa_summary

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: {family}
model\t\t: {model}
model name\t: AMD EPYC
stepping\t: 1
flags\t\t: fpu sse sse2 avx fma avx2 {extra}

processor\t: 1
vendor_id\t: AuthenticAMD
flags\t\t: something else entirely
"""
MEMINFO = "MemTotal:       24617516 kB\nMemFree:        1 kB\n"


def host(family=26, model=2, extra="avx512f avx512_vnni avx512_bf16", mem=MEMINFO) -> Host:
    return current_host(CPUINFO.format(family=family, model=model, extra=extra), mem)


def test_current_host_reads_the_first_cpu_block_and_the_kernel_isa():
    h = host()
    assert h.cpu == "AMD EPYC"
    assert h.cpu_id == "AuthenticAMD family 26 model 2 stepping 1"
    assert h.isa == ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16")
    assert h.memory_gib == pytest.approx(23.5)
    assert h.cores >= 1 and isa_summary(h.isa) == "AVX-512"
    assert "AVX-512" in h.label() and "family 26" in h.label()


def test_the_two_epyc_hosts_of_the_field_notes_differ_in_cpu_and_isa():
    avx2_only = host(family=25, model=1, extra="")
    diffs = host_differences(avx2_only, host())
    assert len(diffs) == 2
    assert diffs[0].startswith("CPU AMD EPYC [AuthenticAMD family 25 model 1")
    assert diffs[1] == "ISA avx512_bf16 avx512_vnni avx512f only here"
    assert host_differences(host(), avx2_only)[1] == "ISA no avx512_bf16 avx512_vnni avx512f here"


def test_same_host_differs_in_nothing_and_gets_no_warning():
    here = host()
    there = Host.from_dict({**here.to_dict(), "torch": "2.13.0", "memory_gib": 24.0,
                            "kernels": {"target": "onednn-prepacked"}})
    assert host_differences(there, Host.from_dict({**here.to_dict(), "torch": "2.13.0+cpu"})) == []
    assert host_warning("p", there, here) is None


@pytest.mark.parametrize("field,there,here,needle", [
    ("cores", 4, 2, "4 cores there, 2 here"),
    ("memory_gib", 64.0, 24.0, "64 GiB there, 24 GiB here"),
    ("torch", "2.9.1", "2.13.0", "torch 2.9.1 there, 2.13.0 here"),
    ("cpu_capability", "AVX512", "AVX2", "cpu_capability AVX512 there, AVX2 here"),
    ("kernels", {"target": "onednn-prepacked"}, {"target": "dense"}, "target kernels onednn-prepacked there, dense here"),
])
def test_each_recorded_field_can_tell_hosts_apart(field, there, here, needle):
    base = host().to_dict()
    diffs = host_differences(Host.from_dict({**base, field: there}), Host.from_dict({**base, field: here}))
    assert diffs == [needle]


def test_unrecorded_fields_are_not_compared():
    assert host_differences(Host(cpu="AMD EPYC", cores=2), host()) == []
    assert host_differences(Host(memory_gib=25.0), Host(memory_gib=24.0)) == []  # within 10%


def test_gpu_profiles_are_compared_on_gpus_and_only_on_a_gpu_host():
    cluster = Host(cpu="Intel Xeon", gpus=("NVIDIA H100 80GB HBM3 (driver 550.54)",) * 5)
    assert host_differences(cluster, host()) == []  # planning for a cluster from a laptop
    h200 = Host(cpu="AMD EPYC", gpus=("NVIDIA H200 (driver 570.86)",))
    assert host_differences(cluster, h200)[0].startswith("GPUs NVIDIA H100")


def test_warnings_name_the_differences_and_the_fix():
    assert host_warning("gpu-preset", None, host()) is None  # datasheet presets: not host-specific
    unknown = host_warning("cpu", Host(cores=2, note="the 2026-11 VM"), host())
    assert "the 2026-11 VM" in unknown and "cannot be checked" in unknown and "ssd-run calibrate-here" in unknown
    other = host_warning("cpu", host(family=25, model=1, extra=""), host())
    assert other.startswith("profile cpu was measured on another host (CPU AMD EPYC [AuthenticAMD family 25")
    assert "\n" not in other and other.endswith("plan with its profile")


def test_round_trip_and_bad_records():
    h = host()
    assert Host.from_dict(h.to_dict()) == h
    with pytest.raises(ConfigError, match=r"host\.cpus: unknown host field"):
        Host.from_dict({"cpus": 2})
    with pytest.raises(ConfigError, match="host: malformed host record"):
        Host.from_dict({"cores": "two"})
    with pytest.raises(ConfigError, match="host: must be an object"):
        Host.from_dict(["AMD"])


# ---- the guest: one boot of one host kind -------------------------------------------------------------
BOOT_A, BOOT_B = "7986af9b-b6f3-4082-9718-211a4c8c8b8d", "0c1d2e3f-0000-4000-8000-123456789abc"
STAT = "cpu  1 2 3 4\nbtime 1796505813\nprocesses 9\n"  # 2026-12-05 21:23:33 UTC


def test_current_host_records_its_guest_from_the_boot_id_and_btime():
    h = current_host(CPUINFO.format(family=26, model=2, extra=""), MEMINFO, BOOT_A + "\n", STAT)
    assert (h.boot_id, h.booted_at) == (BOOT_A, "2026-12-05T21:23Z")
    assert h.guest() == "booted 2026-12-05 21:23 UTC"
    assert replace(h, booted_at="").guest() == "boot id 7986af9b"
    bare = current_host(CPUINFO.format(family=26, model=2, extra=""), MEMINFO, "", "cpu 1 2\n")  # not Linux
    assert (bare.boot_id, bare.booted_at, bare.guest()) == ("", "", "")


def test_a_record_without_a_guest_reads_and_writes_as_before():
    old = host().without_guest()
    assert "boot_id" not in old.to_dict() and "booted_at" not in old.to_dict()  # the shipped traces' records
    h = replace(old, boot_id=BOOT_A, booted_at="2026-12-05T21:23Z")
    assert h.to_dict()["boot_id"] == BOOT_A and Host.from_dict(h.to_dict()) == h


def test_a_null_text_field_reads_as_not_recorded():
    h = Host.from_dict({"cpu": None, "cpu_id": "AuthenticAMD family 25", "boot_id": None, "booted_at": None, "note": None})
    assert (h.cpu, h.boot_id, h.booted_at, h.note, h.guest()) == ("", "", "", "", "")
    assert guest_note(h, replace(h, boot_id=BOOT_A)) is None  # a null boot id names no guest to differ from


def test_another_guest_of_one_host_kind_is_no_host_difference_but_its_own_warning():
    a, b = replace(host(), boot_id=BOOT_A, booted_at="2026-12-05T21:23Z"), replace(host(), boot_id=BOOT_B, booted_at="")
    assert host_differences(a, b) == []
    assert guest_note(a, b) == "another guest of this host kind (booted 2026-12-05 21:23 UTC there, boot id 0c1d2e3f here)"
    assert host_warning("cpu", a, b, "; re-time it") == ("profile cpu was measured on another guest of this host kind "
                                                         "(booted 2026-12-05 21:23 UTC there, boot id 0c1d2e3f here); "
                                                         "re-time it")
    for same in (a, a.without_guest()):  # the same guest, or a record that cannot say: nothing to warn about
        assert guest_note(same, a) is None and host_warning("cpu", same, a, "; re-time it") is None
    other_kind = replace(host(family=25, model=1, extra=""), boot_id=BOOT_B)
    assert "another host (CPU" in host_warning("cpu", a, other_kind, "; re-time it")  # the host kind comes first


def test_a_profile_without_its_guest_timed_before_this_guest_booted_is_from_another_boot():
    """A record made before guests were recorded cannot name its guest; if its forwards were timed before this guest
    booted, they ran on another boot all the same (two Zen 5 guests 128 h apart ran the same runs 1.16-1.28x apart:
    traces/cpu-fp32-zen5-check)."""
    old, here = host().without_guest(), replace(host(), boot_id=BOOT_B, booted_at="2026-12-06T21:59Z")
    assert guest_note(old, here, "2026-12-01T15:09:29Z") == ("an earlier boot of this host kind (timed "
                                                              "2026-12-01T15:09:29Z, before this guest booted "
                                                              "2026-12-06 21:59 UTC)")
    assert host_warning("cpu", old, here, "; re-time it", "2026-12-01T15:09:29Z").endswith("UTC); re-time it")
    for timed in ("2026-12-06T22:10:00Z", "", "not a time"):  # timed on this boot, or no time to compare
        assert guest_note(old, here, timed) is None
    assert guest_note(old, replace(here, booted_at=""), "2026-12-01T15:09:29Z") is None  # this boot's time unknown
