"""The host a profile was measured on, the host we run on now, and how the two differ.

Latencies are per host, not per machine kind: two 2-core AMD EPYC VMs of this project's kind ran the same
Qwen pair 1.7x apart (one AVX2-only, one with AVX-512), and the extra cost of a multi-token verify, which
decides K, differed too (2.0x one token vs 1.3x). So every trace header and every measured profile records:
  cpu, cpu_id   model name and vendor / family / model / stepping (a VM may show only "AMD EPYC")
  isa           the instruction-set extensions the matmul kernels use (KERNEL_ISA) that the CPU has
  cores         cores this process may run on; memory_gib: total memory
  gpus          "name (driver X)" per visible NVIDIA GPU
  torch, onednn versions, and cpu_capability: the ISA torch's own kernels dispatch to ("AVX512", "AVX2")
  kernels       role -> the Linear kernel path that actually ran ("onednn-prepacked", "dense", ...)
  boot_id, booted_at  which guest: the kernel's random id of this boot and when it booted (UTC). Not the host kind:
                two guests of one kind differ here only, and their latencies still moved 0.73x between two of them
                (traces/cpu-fp32-zen4-pool40r), so a profile from another guest gets its own warning (guest_note)
The runtime fills onednn, cpu_capability and kernels (ssd_sim never imports torch).
`current_host()` reads this host without torch; `host_differences` names what differs in one short phrase
per field (the host kind: not the guest); `guest_note` says when only the guest differs; `host_warning` turns
either into the one line `ssd-plan` and the dashboard print.
"""

from __future__ import annotations

import datetime
import importlib.metadata
import os
import platform
import re
import shutil
import subprocess
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.values import parse_utc, utc_text

KERNEL_ISA = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "amx_bf16",
              "amx_int8", "asimd", "sve")
MEMORY_TOLERANCE = 0.10  # relative difference in total memory that counts as another host
FIX = "run `ssd-run calibrate-here` on this host (a few minutes) and plan with its profile"


@dataclass(frozen=True)
class Host:
    """What a measurement depended on (see the module docstring). Empty / 0 = not recorded."""

    cpu: str = ""
    cpu_id: str = ""
    isa: tuple[str, ...] = ()
    cores: int = 0
    memory_gib: float = 0.0
    gpus: tuple[str, ...] = ()
    torch: str = ""
    onednn: str = ""
    cpu_capability: str = ""
    kernels: dict[str, str] = field(default_factory=dict)
    note: str = ""  # free text, e.g. why a field is not recorded
    boot_id: str = ""  # /proc/sys/kernel/random/boot_id: one boot of one guest ("" = not recorded, or several)
    booted_at: str = ""  # when that guest booted, ISO UTC to the minute (/proc/stat btime)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["isa"], d["gpus"] = list(self.isa), list(self.gpus)
        for key in GUEST_FIELDS:  # records made before the guest was recorded stay as they were
            if not d[key]:
                del d[key]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = "host") -> Host:
        if not isinstance(d, dict):
            raise ConfigError(where, f"must be an object with cpu, isa, cores, ... (got {type(d).__name__})")
        unknown = sorted(set(d) - set(cls.__dataclass_fields__))
        if unknown:
            raise ConfigError(f"{where}.{unknown[0]}", f"unknown host field; known: {', '.join(cls.__dataclass_fields__)}")
        try:
            return cls(cpu=_text(d, "cpu"), cpu_id=_text(d, "cpu_id"),
                       isa=tuple(str(x) for x in d.get("isa", ())), cores=int(d.get("cores", 0)),
                       memory_gib=float(d.get("memory_gib", 0.0)), gpus=tuple(str(x) for x in d.get("gpus", ())),
                       torch=_text(d, "torch"), onednn=_text(d, "onednn"), cpu_capability=_text(d, "cpu_capability"),
                       kernels={str(k): str(v) for k, v in dict(d.get("kernels", {})).items()},
                       note=_text(d, "note"), boot_id=_text(d, "boot_id"), booted_at=_text(d, "booted_at"))
        except (TypeError, ValueError) as e:
            raise ConfigError(where, f"malformed host record ({e}); write it with ssd-run") from None

    @property
    def recorded(self) -> bool:
        """Whether the CPU (or, on a GPU host, the GPUs) is known, i.e. the record can be compared at all."""
        return bool(self.cpu_id or self.cpu or self.gpus)

    def label(self) -> str:
        """One short line: CPU, notable ISA, cores, memory, GPUs."""
        if not self.recorded:
            return f"an unrecorded host ({self.note})" if self.note else "an unrecorded host"
        cpu = self.cpu or "unknown CPU"
        if self.cpu_id and self.cpu_id not in cpu:
            cpu += f" [{self.cpu_id}]"
        parts = [cpu, isa_summary(self.isa)]
        parts += [f"{self.cores} cores"] if self.cores else []
        parts += [f"{self.memory_gib:.0f} GiB"] if self.memory_gib else []
        parts += [", ".join(self.gpus)] if self.gpus else []
        return ", ".join(p for p in parts if p)

    def guest(self) -> str:
        """'booted 2026-12-05 21:23 UTC' ('boot id 7986af9b' when the time is unknown), or '' without a guest."""
        if not self.boot_id:
            return ""
        return f"booted {self.booted_at.replace('T', ' ').removesuffix('Z')} UTC" if self.booted_at \
            else f"boot id {self.boot_id[:8]}"

    def without_guest(self) -> Host:
        """This host kind with no guest recorded: what a record pooled over several guests can say."""
        return replace(self, boot_id="", booted_at="")


GUEST_FIELDS = ("boot_id", "booted_at")


def _text(d: dict[str, Any], key: str) -> str:
    """A text field of a host record: '' where it is missing or null (not the text 'None', which would name a guest)."""
    value = d.get(key)
    return "" if value is None else str(value)


def isa_summary(isa: tuple[str, ...]) -> str:
    """The widest vector / matrix extension: 'AMX', 'AVX-512', 'AVX2', 'NEON/SVE' or ''."""
    s = set(isa)
    for name, flag in (("AMX", "amx_tile"), ("AVX-512", "avx512f"), ("AVX2", "avx2"), ("SVE", "sve"),
                       ("NEON", "asimd")):
        if flag in s:
            return name
    return ""


# ---- this host ---------------------------------------------------------------------------------------
def current_host(cpuinfo: str | None = None, meminfo: str | None = None, boot_id: str | None = None,
                 stat: str | None = None) -> Host:
    """This host as ssd_sim can see it without torch (torch's version from package metadata, no import); the text
    of /proc/cpuinfo, /proc/meminfo, /proc/sys/kernel/random/boot_id and /proc/stat is read where not given."""
    cpuinfo = _read("/proc/cpuinfo") if cpuinfo is None else cpuinfo
    meminfo = _read("/proc/meminfo") if meminfo is None else meminfo
    boot_id = _read("/proc/sys/kernel/random/boot_id") if boot_id is None else boot_id
    stat = _read("/proc/stat") if stat is None else stat
    first = _first_cpu(cpuinfo)
    flags = set(first.get("flags", first.get("Features", "")).split())
    cpu_id = " ".join(f"{k} {first[key]}" if k else first[key] for k, key in
                      (("", "vendor_id"), ("family", "cpu family"), ("model", "model"), ("stepping", "stepping"))
                      if key in first)
    mem = re.search(r"^MemTotal:\s+(\d+)\s*kB", meminfo, flags=re.M)
    return Host(cpu=first.get("model name", platform.processor() or platform.machine()), cpu_id=cpu_id,
                isa=tuple(f for f in KERNEL_ISA if f in flags), cores=usable_cores(),
                memory_gib=round(int(mem.group(1)) / 2**20, 1) if mem else 0.0, gpus=_nvidia_gpus(),
                torch=_version("torch"), boot_id=boot_id.strip(), booted_at=_booted_at(stat))


def _booted_at(stat: str) -> str:
    """The boot time in /proc/stat ('btime <unix seconds>') as ISO UTC to the minute, or '' without one."""
    btime = re.search(r"^btime\s+(\d+)\s*$", stat, flags=re.M)
    if btime is None:
        return ""
    at = datetime.datetime.fromtimestamp(int(btime.group(1)), tz=datetime.UTC)
    return at.strftime("%Y-%m-%dT%H:%MZ")


def _read(path: str) -> str:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return ""


def _first_cpu(cpuinfo: str) -> dict[str, str]:
    """The key: value lines of the first processor block of /proc/cpuinfo."""
    out: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        if not line.strip():
            if out:
                break
            continue
        key, _, value = line.partition(":")
        out.setdefault(key.strip(), value.strip())
    return out


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity; all cores where affinity is unknown)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 0


def _nvidia_gpus() -> tuple[str, ...]:
    """('NVIDIA H200 (driver 570.86)', ...) from nvidia-smi, or () without one (2 s at most)."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return ()
    try:
        out = subprocess.run([exe, "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=2.0).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    rows = [line.split(",") for line in out.splitlines() if "," in line]
    return tuple(f"{name.strip()} (driver {drv.strip()})" for name, drv in rows)


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return ""


# ---- comparison --------------------------------------------------------------------------------------
def host_differences(measured: Host, here: Host) -> list[str]:
    """What differs between the host a profile was measured on and this one, one phrase per field.

    Only fields recorded on both sides are compared. A GPU-measured profile is compared on its GPUs only
    when this host has GPUs too (planning for a cluster from a laptop is the normal case, not a mismatch).
    """
    out: list[str] = []
    if measured.gpus:
        if here.gpus and sorted(measured.gpus) != sorted(here.gpus):
            out.append(f"GPUs {', '.join(measured.gpus)} there, {', '.join(here.gpus)} here")
        return out
    if measured.cpu_id and here.cpu_id and measured.cpu_id != here.cpu_id:
        out.append(f"CPU {measured.cpu} [{measured.cpu_id}] there, {here.cpu} [{here.cpu_id}] here")
    elif measured.cpu and here.cpu and measured.cpu != here.cpu:
        out.append(f"CPU {measured.cpu} there, {here.cpu} here")
    if measured.isa and here.isa and set(measured.isa) != set(here.isa):
        lost, new = sorted(set(measured.isa) - set(here.isa)), sorted(set(here.isa) - set(measured.isa))
        out.append("ISA " + "; ".join(([f"no {' '.join(lost)} here"] if lost else []) +
                                      ([f"{' '.join(new)} only here"] if new else [])))
    if measured.cores and here.cores and measured.cores != here.cores:
        out.append(f"{measured.cores} cores there, {here.cores} here")
    if measured.memory_gib and here.memory_gib and \
            abs(measured.memory_gib - here.memory_gib) > MEMORY_TOLERANCE * max(measured.memory_gib, here.memory_gib):
        out.append(f"{measured.memory_gib:.0f} GiB there, {here.memory_gib:.0f} GiB here")
    for name in ("torch", "onednn", "cpu_capability"):
        a, b = getattr(measured, name), getattr(here, name)
        if a and b and _release(a) != _release(b):
            out.append(f"{name} {a} there, {b} here")
    for role in sorted(set(measured.kernels) & set(here.kernels)):
        if measured.kernels[role] != here.kernels[role]:
            out.append(f"{role} kernels {measured.kernels[role]} there, {here.kernels[role]} here")
    return out


def _release(version: str) -> str:
    """'2.13.0+cpu' -> '2.13.0': the local build tag does not change the kernels we compare."""
    return version.split("+", 1)[0]


def guest_note(measured: Host, here: Host, timed_at: str = "") -> str | None:
    """'another guest of this host kind (...)' when both records name their guest and the two differ, or 'an earlier
    boot ...' when the profile's record names none but its forwards were timed (`timed_at`, ISO UTC: the last) before
    this guest booted, so on another boot whatever guest it was; else None (the same guest, or not known: a record
    pooled over several guests, or no time to compare)."""
    if measured.boot_id and here.boot_id:
        return None if measured.boot_id == here.boot_id else \
            f"another guest of this host kind ({measured.guest()} there, {here.guest()} here)"
    timed, booted = parse_utc(timed_at), parse_utc(here.booted_at)
    if measured.boot_id or not (timed and booted) or timed >= booted:
        return None
    return (f"an earlier boot of this host kind (timed {utc_text(timed)}, before this guest booted "
            f"{here.booted_at.replace('T', ' ').removesuffix('Z')} UTC)")


def host_warning(profile_name: str, measured: Host | None, here: Host, guest_fix: str = "",
                 timed_at: str = "") -> str | None:
    """The one-line warning for a profile used on `here`, or None when nothing suggests a mismatch.

    No record at all (GPU presets built from datasheets and published numbers) gives no warning; a CPU
    record without the CPU's identity gives one, because it cannot be checked. The same host kind on another
    guest (guest_note; `timed_at`: when the profile's forwards were last timed) gives one ending in `guest_fix` (what
    to do, from the caller, who knows the drift).
    """
    if measured is None:
        return None
    if not measured.recorded:
        return (f"profile {profile_name} was measured on {measured.label()}, which cannot be checked against "
                f"this one; CPU latencies differ by up to 1.7x between hosts of one kind: {FIX}")
    diffs = host_differences(measured, here)
    if not diffs:
        other = guest_note(measured, here, timed_at)
        return f"profile {profile_name} was measured on {other}{guest_fix}" if other else None
    return f"profile {profile_name} was measured on another host ({'; '.join(diffs)}): its latencies may not hold here; {FIX}"
