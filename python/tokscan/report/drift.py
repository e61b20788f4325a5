"""Drift between two reports: counts, length distributions (quantiles and a Kolmogorov-Smirnov distance from
the stored log2 histograms), special-token rates and anomaly rates, per category and overall."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # For the annotations only: `Report.attach_drift` imports this module, so a run-time import of the report
    # package from here would be a cycle.
    from . import Report

#: Default thresholds; override in the `[drift]` table of the configuration.
DEFAULT_THRESHOLDS: dict[str, float] = {
    "samples": 0.20,  # relative change of a category's sample count
    "tokens": 0.20,  # relative change of a category's token count
    "median": 0.15,  # relative change of the median prompt / thinking / response length
    "ks": 0.15,  # KS distance between the length histograms
    "special_rate": 0.25,  # relative change of a special token's rate per token (tokens with >= 100 uses)
    "anomaly_rate_ratio": 2.0,  # an anomaly's rate grew by this factor ...
    "anomaly_rate_delta": 0.1,  # ... and by at least this many percentage points
}
PARTS = ("prompt", "thinking", "response")


@dataclass(frozen=True)
class Drift:
    check: str  # samples | tokens | median | ks | special_rate | anomaly_rate | category_added | category_removed
    category: str  # category name, or "all"
    subject: str  # length part, token or code name; "" when none
    base: float
    new: float
    threshold: float
    message: str


def _rel(base: float, new: float) -> float:
    if base == 0:
        return 0.0 if new == 0 else float("inf")
    return (new - base) / base


def ks_distance(h1: dict[str, list[int]], h2: dict[str, list[int]]) -> float:
    """Max distance between the CDFs of two log2 histograms (bins aligned by their lower edges)."""
    edges = sorted(set(h1["edges"]) | set(h2["edges"]))

    def cdf(h: dict[str, list[int]]) -> list[float]:
        by_edge = dict(zip(h["edges"], h["counts"], strict=True))
        total = sum(h["counts"]) or 1
        acc, out = 0, []
        for e in edges:
            acc += by_edge.get(e, 0)
            out.append(acc / total)
        return out

    return max((abs(a - b) for a, b in zip(cdf(h1), cdf(h2), strict=True)), default=0.0)


def compare(base: Report, new: Report, thresholds: dict[str, float] | None = None) -> list[Drift]:
    t = {**DEFAULT_THRESHOLDS, **(thresholds or {})}
    out: list[Drift] = []
    bc, nc = base.categories, new.categories
    for name in sorted(set(bc) - set(nc)):
        out.append(Drift("category_removed", name, "", bc[name]["samples"], 0, 0, f"category {name} is gone"))
    for name in sorted(set(nc) - set(bc)):
        out.append(Drift("category_added", name, "", 0, nc[name]["samples"], 0, f"new category {name}"))
    pairs: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
        (name, bc[name], nc[name]) for name in sorted(set(bc) & set(nc))
    ]
    pairs.append(("all", base.data["overall"], new.data["overall"]))
    for name, b, n in pairs:
        for check in ("samples", "tokens"):
            r = _rel(b[check], n[check])
            if abs(r) > t[check]:
                out.append(
                    Drift(
                        check,
                        name,
                        "",
                        b[check],
                        n[check],
                        t[check],
                        f"{name}: {check} {b[check]:,} -> {n[check]:,} ({r:+.0%})",
                    )
                )
        for part in PARTS:
            bl, nl = b["lengths"][part], n["lengths"][part]
            r = _rel(bl["median"], nl["median"])
            if abs(r) > t["median"]:
                out.append(
                    Drift(
                        "median",
                        name,
                        part,
                        bl["median"],
                        nl["median"],
                        t["median"],
                        f"{name}: median {part} length {bl['median']:,.0f} -> {nl['median']:,.0f} ({r:+.0%})",
                    )
                )
            d = ks_distance(bl["histogram"], nl["histogram"])
            if d > t["ks"]:
                out.append(
                    Drift(
                        "ks",
                        name,
                        part,
                        0.0,
                        d,
                        t["ks"],
                        f"{name}: {part} length distribution moved (KS distance {d:.2f})",
                    )
                )
        if name == "all":
            for tok, bcount in b["special_tokens"].items():
                ncount = n["special_tokens"].get(tok, 0)
                if max(bcount, ncount) < 100:
                    continue
                br, nr = bcount / max(1, b["tokens"]), ncount / max(1, n["tokens"])
                r = _rel(br, nr)
                if abs(r) > t["special_rate"]:
                    out.append(
                        Drift(
                            "special_rate",
                            name,
                            tok,
                            br,
                            nr,
                            t["special_rate"],
                            f"rate of {tok} per 1k tokens {1000 * br:.2f} -> {1000 * nr:.2f} ({r:+.0%})",
                        )
                    )
            for code, bcount in b["anomalies"].items():
                ncount = n["anomalies"].get(code, 0)
                br, nr = 100 * bcount / max(1, b["samples"]), 100 * ncount / max(1, n["samples"])
                grew = nr - br >= t["anomaly_rate_delta"] and (br == 0 or nr / br >= t["anomaly_rate_ratio"])
                if grew:
                    out.append(
                        Drift(
                            "anomaly_rate",
                            name,
                            code,
                            br,
                            nr,
                            t["anomaly_rate_ratio"],
                            f"{code} rate {br:.2f}% -> {nr:.2f}%",
                        )
                    )
    return out


def to_json(drifts: list[Drift]) -> list[dict[str, Any]]:
    return [asdict(d) for d in drifts]
