"""Name the mistake: match what a module returned against the mutated references.

Given the module's outputs on known cases (known inputs, known weights), a mutant
*matches* when its output equals the observed one on every case within ``tol``,
fully masked query rows excluded (and rows where the mutant itself has no visible
key, whose value depends on the fill constant). One mistake is tried first, then
two at once, among mutants that turn different knobs.

Speed: every case keeps a :class:`~attncheck.dynamic.reference.mutants.Stages` memo, so the
projections and score matrices shared by many mutants are computed once; mutants
that do nothing on these cases (a mask mistake with no mask), or that duplicate
another's output, are pruned before pairing; pairs are screened on the first case
before the others. Small tensors run faster on one thread, so the search does.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import combinations

import torch

from attncheck.dynamic.reference.mha import causal_keep, fully_masked_rows
from attncheck.dynamic.reference.mutants import (
    MUTANTS,
    REFERENCE,
    Case,
    Knobs,
    Mutant,
    Setting,
    Stages,
    knob_groups,
)


@dataclass(frozen=True)
class Diagnosis:
    """The verdict on one module: which known mistakes explain its outputs.

    ``mutants`` is () when the output matches the reference (``matches_reference``)
    or when nothing known explains it; one mutant; or a pair (two mistakes at once).
    ``max_error`` is the largest difference between the observed output and the
    explanation (the reference when nothing matched). ``alternatives`` are other
    explanations that match as well (e.g. 1/sqrt(q_len) when q_len == k_len).
    """

    mutants: tuple[Mutant, ...]
    max_error: float
    message: str
    reference_error: float
    matches_reference: bool = False
    alternatives: tuple[tuple[Mutant, ...], ...] = ()

    @property
    def codes(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(m.code for m in self.mutants))


@contextmanager
def _one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.no_grad():
            yield
    finally:
        torch.set_num_threads(threads)


def comparable_rows(case: Case, heads: int) -> torch.Tensor:
    """(b, q) bool: the rows compared, i.e. the queries that see at least one key."""
    b, q_len, k_len = case.query.shape[0], case.query.shape[1], case.key.shape[1]
    keep = case.keep
    causal = causal_keep(q_len, k_len, case.causal)
    if causal is not None:
        keep = causal if keep is None else keep & causal
    return ~fully_masked_rows(keep, (b, heads, q_len, k_len))


def _errors(outputs: torch.Tensor, observed: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """(n,) max |output - observed| of n stacked outputs over the compared rows.

    A row is compared when the case keeps a key for it and the mutant's output
    there is defined (finite). inf where the observed output is not finite on a
    compared row; NaN where no row is compared (the case says nothing).
    """
    compared = rows & torch.isfinite(outputs).all(dim=-1)  # (n, b, q)
    diff = torch.where(compared, (outputs - observed).abs().amax(dim=-1), 0.0)
    worst = diff.amax(dim=(1, 2)).nan_to_num(nan=math.inf)
    return worst.masked_fill(~compared.any(dim=2).any(dim=1), math.nan)


@dataclass
class _Survey:
    """Single mistakes on every case: errors (n, C) against the observed outputs
    (NaN: the case says nothing, inf: cannot be built), which ones change nothing
    on a case (``inert``), and one representative index per distinct output."""

    errors: torch.Tensor
    inert: torch.Tensor
    distinct: list[int]

    def worst(self) -> list[float]:
        return _worst(self.errors)


def _worst(errors: torch.Tensor) -> list[float]:
    """Reduce (n, C) per-case errors to n, ignoring uninformative cases."""
    worst = torch.full((errors.shape[0],), math.nan, dtype=torch.float64)
    for column in errors.T:
        worst = torch.fmax(worst, column)  # fmax: a NaN (uninformative case) loses
    return worst.nan_to_num(nan=math.inf).tolist()


@dataclass
class _Search:
    """The cases, their memos and the observed outputs of one diagnosis."""

    stages: list[Stages]
    observed: list[torch.Tensor]
    rows: list[torch.Tensor]

    def _stacked(self, case: int, candidates: Sequence[Knobs]) -> tuple[list[int], torch.Tensor | None]:
        """Indices of the candidates buildable with the observed shape, and their stacked outputs."""
        outputs = self.stages[case].outputs(candidates)
        shape = self.observed[case].shape
        built = [i for i, out in enumerate(outputs) if out is not None and out.shape == shape]
        return built, torch.stack([outputs[i] for i in built]) if built else None

    def case_errors(self, candidates: Sequence[Knobs], cases: Sequence[int] | None = None) -> torch.Tensor:
        """(n, C) error of each candidate on each case."""
        cases = range(len(self.stages)) if cases is None else cases
        errors = torch.full((len(candidates), len(cases)), math.inf, dtype=torch.float64)
        for column, case in enumerate(cases):
            built, stacked = self._stacked(case, candidates)
            if stacked is not None:
                errors[built, column] = _errors(stacked, self.observed[case], self.rows[case])
        return errors

    def survey(self, candidates: Sequence[Knobs], tol: float) -> _Survey:
        """Errors of single mistakes, plus what pairing them needs to know."""
        n, cases = len(candidates), len(self.stages)
        errors = torch.full((n, cases), math.inf, dtype=torch.float64)
        inert = torch.zeros((n, cases), dtype=torch.bool)
        keys: list[list[bytes]] = [[] for _ in range(n)]
        for case in range(cases):
            built, stacked = self._stacked(case, candidates)
            if stacked is None:
                continue
            errors[built, case] = _errors(stacked, self.observed[case], self.rows[case])
            reference = self.stages[case].output(REFERENCE)
            close = ((stacked - reference).abs() <= tol) | (stacked.isnan() & reference.isnan())
            inert[built, case] = close.flatten(1).all(dim=1)
            rounded = stacked.nan_to_num(nan=0.0).mul(1e8).round()
            for i, out in zip(built, rounded, strict=True):
                keys[i].append(out.numpy().tobytes())
        seen: dict[bytes, int] = {}
        for i in range(n):
            if len(keys[i]) == cases and not bool(inert[i].all()):
                seen.setdefault(b"".join(keys[i]), i)
        return _Survey(errors, inert, list(seen.values()))


def diagnose(
    observations: Sequence[tuple[Case, torch.Tensor]],
    setting: Setting,
    tol: float,
    *,
    mutants: tuple[Mutant, ...] = MUTANTS,
    pairs: bool = True,
) -> Diagnosis:
    """Which known mistake (or pair of mistakes) explains the observed outputs.

    ``observations`` pairs each case with the (b, q, d) output the module gave on
    it; ``tol`` is the absolute tolerance of a match (the runner's float64 or
    low-precision tolerance).
    """
    if not observations:
        raise ValueError("diagnose needs at least one observation")
    with _one_thread():
        search = _Search(
            [Stages(case, setting) for case, _ in observations],
            [out.detach().to(torch.float64) for _, out in observations],
            [comparable_rows(case, setting.num_heads) for case, _ in observations],
        )
        shape = _shape_mismatch(search)
        if shape:
            return Diagnosis((), math.inf, shape, math.inf)
        reference_error = _worst(search.case_errors([REFERENCE]))[0]
        if reference_error <= tol:
            return Diagnosis(
                (), reference_error, "matches the reference", reference_error, matches_reference=True
            )
        groups = knob_groups(mutants)
        knobs = list(groups)
        survey = search.survey(knobs, tol)
        matched = [(err, groups[k]) for k, err in zip(knobs, survey.worst(), strict=True) if err <= tol]
        if not matched and pairs:
            matched = _pair_matches(search, knobs, survey, groups, tol)
    return _verdict(matched, reference_error, tol, observations[0][0], setting)


def _shape_mismatch(search: _Search) -> str | None:
    """A plain message when an output cannot be compared at all (ATT902 is the runner's to report)."""
    for stage, observed in zip(search.stages, search.observed, strict=True):
        expected = stage.output(REFERENCE).shape
        if observed.shape != expected:
            return f"output shape {tuple(observed.shape)} differs from {tuple(expected)}: nothing to compare"
    return None


def _pair_matches(
    search: _Search,
    knobs: list[Knobs],
    survey: _Survey,
    groups: dict[Knobs, tuple[Mutant, ...]],
    tol: float,
) -> list[tuple[float, tuple[Mutant, ...]]]:
    """(error, (mutant, mutant)) for every pair of distinct, effective mistakes that matches.

    Pruning before anything is computed: the two must turn different knobs, and on
    a case where one of them changes nothing the pair is the other alone, so the
    other must already match there. Survivors are screened on one case, all at
    once, before the remaining cases.
    """
    fits = (survey.errors <= tol) | survey.errors.isnan()  # (n, C): matches, or the case says nothing
    turned = {i: knobs[i].turned() for i in survey.distinct}
    pairs = [
        (a, b)
        for a, b in combinations(survey.distinct, 2)
        if not turned[a] & turned[b]
        and bool((fits[b] | ~survey.inert[a]).all())
        and bool((fits[a] | ~survey.inert[b]).all())
    ]
    if not pairs:
        return []
    combined = [knobs[a].combine(knobs[b]) for a, b in pairs]
    screen = search.case_errors(combined, [0])[:, 0]
    survivors = [i for i in range(len(pairs)) if not bool(screen[i] > tol)]  # NaN (uninformative) survives
    errors = _worst(search.case_errors([combined[i] for i in survivors]))
    return [
        (err, (groups[knobs[pairs[i][0]]][0], groups[knobs[pairs[i][1]]][0]))
        for i, err in zip(survivors, errors, strict=True)
        if err <= tol
    ]


def _explain(mutant: Mutant, case: Case, setting: Setting) -> str:
    why = mutant.why[0].upper() + mutant.why[1:]
    return (
        f"{mutant.code} {mutant.name}: behaves exactly like attention that {mutant.describe(case, setting)}. "
        f"{why} Fix: {mutant.fix}"
    )


def _verdict(
    matched: list[tuple[float, tuple[Mutant, ...]]],
    reference_error: float,
    tol: float,
    case: Case,
    setting: Setting,
) -> Diagnosis:
    """The best explanation (smallest error, then catalogue order) and the others that also match."""
    if not matched:
        message = (
            f"output differs from the reference (max error {reference_error:.3g} > tolerance {tol:.3g}) "
            "and no known mistake, alone or in pairs, explains it"
        )
        return Diagnosis((), reference_error, message, reference_error)
    # Errors this small are ties (keep the catalogue order): float32 outputs carry ~1e-7 of rounding, so
    # mutants closer than that (scores times 0 vs filled with -1e-9) cannot be told apart by their error.
    floor = tol * 0.1
    ranked = sorted(enumerate(matched), key=lambda item: (max(item[1][0], floor), item[0]))
    explanations: list[tuple[Mutant, ...]] = []
    for _, (_, group) in ranked:
        # a knob group of singles (1/head_dim and scaled twice) is several stories for one output
        singles = all(m.knobs == group[0].knobs for m in group)
        explanations.extend([(m,) for m in group] if singles else [group])
    best = explanations[0]
    if len(best) == 1:
        message = _explain(best[0], case, setting)
    else:
        message = "two mistakes: " + " ".join(
            f"({i}) {_explain(m, case, setting)}" for i, m in enumerate(best, 1)
        )
    return Diagnosis(best, ranked[0][1][0], message, reference_error, alternatives=tuple(explanations[1:]))
