"""The decision rule of the GPU-bracket claim check, on figures of the kind the H200 gave (session 9).

The bracket itself needs two processes on a GPU (``tests/test_split_gpu.py``, ``tests/test_whitebox_gpu.py``);
here only the rule that turns brackets, claims and the calibration into a verdict.
"""

from __future__ import annotations

import dataclasses

import pytest

from cudagym.errors import ConfigError
from cudagym.judge.harness.claims import BRACKET_SLACK_US, disputed_yardstick, judge_bracketed_claims
from cudagym.judge.harness.runner import arm_wait_s
from cudagym.judge.harness.stats import median
from cudagym.judge.protocol import DEFAULT_PROTOCOL
from cudagym.judge.split.remote import ARM_WAIT_MAX_S, ARM_WAIT_S

CALIBRATION = [674.9, 673.0, 675.2, 674.1, 676.0, 673.8, 674.4, 674.6, 675.0, 673.5, 674.2, 674.8, 673.9, 675.5, 674.0]


def _calls(claim: float, gap: float, n: int = 30) -> tuple[list[float], list[float]]:
    claims = [claim + 0.1 * (i % 5) for i in range(n)]
    return claims, [c + gap + 0.2 * (i % 7) for i, c in enumerate(claims)]


def test_an_honest_call_whose_gap_matches_the_calibration_stands() -> None:
    claims, brackets = _calls(139.0, 671.4)
    note, problem = judge_bracketed_claims(claims, brackets, CALIBRATION)
    assert problem == ""
    assert "allowed shortfall" in note and "139" in note


def test_a_claim_that_leaves_out_the_work_is_unverifiable() -> None:
    claims, brackets = _calls(7.0, 674.4 + 131.0)  # Swish's 138 us kernel claimed as 7 us
    _, problem = judge_bracketed_claims(claims, brackets, CALIBRATION)
    assert "work ran outside the timed region" in problem


def test_a_shortfall_within_the_slack_stands_and_one_beyond_it_does_not() -> None:
    base = sorted(CALIBRATION)[len(CALIBRATION) // 2]
    within = _calls(100.0, base + 0.05 * 100.0 + BRACKET_SLACK_US - 2.0)
    beyond = _calls(100.0, base + 0.05 * 100.0 + BRACKET_SLACK_US + 4.0)
    assert judge_bracketed_claims(*within, CALIBRATION)[1] == ""
    assert judge_bracketed_claims(*beyond, CALIBRATION)[1] != ""


def test_a_busy_gpu_in_a_few_calls_does_not_sink_an_honest_claim() -> None:
    claims, brackets = _calls(139.0, 671.4)
    for i in range(0, 30, 6):  # another context's time slice in one call of six
        brackets[i] += 900.0
    assert judge_bracketed_claims(claims, brackets, CALIBRATION)[1] == ""


def test_a_claim_beyond_its_bracket_is_unverifiable() -> None:
    claims, brackets = _calls(139.0, 671.4)
    claims[3] = brackets[3] + 1.0
    assert "claimed more device time" in judge_bracketed_claims(claims, brackets, CALIBRATION)[1]


def test_without_a_calibration_nothing_can_be_confirmed() -> None:
    claims, brackets = _calls(139.0, 671.4)
    assert "could not be calibrated" in judge_bracketed_claims(claims, brackets, [])[1]


def test_a_bracket_closed_before_the_calls_own_path_is_unverifiable() -> None:
    claims, brackets = _calls(1.0, 252.5)  # H200: "done" written from a side stream ahead of the work
    assert "signalled done ahead of its call's work" in judge_bracketed_claims(claims, brackets, CALIBRATION)[1]


def test_early_done_on_a_few_calls_is_enough_and_honest_noise_is_not() -> None:
    claims, brackets = _calls(139.0, 671.4)
    for i in (4, 9):  # calls the attacker guesses are not compared
        brackets[i] -= 400.0
    assert "2 of 30 timed call(s)" in judge_bracketed_claims(claims, brackets, CALIBRATION)[1]
    claims, brackets = _calls(139.0, 671.4)
    brackets[4] -= 400.0  # one short call alone moves no median: let pass
    assert judge_bracketed_claims(claims, brackets, CALIBRATION)[1] == ""
    claims, brackets = _calls(139.0, 671.4)
    for i in range(0, 30, 3):  # honest calls a few microseconds under the empty call's cost
        brackets[i] -= 7.0
    assert judge_bracketed_claims(claims, brackets, CALIBRATION)[1] == ""


# KernelBench L1/4 on the H200 (sweep of session 12, kernelbench-v0.4, the reference as candidate): an 8 GiB input
# set, staged by the judge inside each bracket, took 378 us longer in the calibration than in the timed calls
L1_4_CALIBRATION = [4739.1 + 0.3 * (i % 5) for i in range(15)]


def test_a_slower_staging_in_the_calibration_does_not_make_an_honest_call_short() -> None:
    claims, brackets = _calls(2310.2, 4361.5)
    staged = [4050.0 + 0.2 * (i % 3) for i in range(30)]  # the judge's copy and flush, until its go
    calibration_staged = [4428.0 + 0.2 * (i % 3) for i in range(15)]  # the same, 378 us slower
    note, problem = judge_bracketed_claims(claims, brackets, L1_4_CALIBRATION, BRACKET_SLACK_US, staged,
                                           calibration_staged)
    assert problem == "", problem
    assert "the judge's own staging (inputs, L2 flush): median 4050.2 us, 4428.2 us in the empty calls" in note
    assert "inputs, poison, flush" not in note  # its parts unmeasured: not named


def test_the_note_names_the_stagings_parts_where_a_staging_grew() -> None:
    """KernelBench L2/19 (H100, sessions 35-36): the staging grew from 2,112 to 4,194 us and made the honest reference
    a violation; the note then says which of its parts grew (a judge's rule stays as it is: the whole bracket)."""
    claims, brackets = _calls(16644.8, 4488.8)
    staged, calibration_staged = [4194.4] * 30, [2112.1] * 15
    parts, calibration_parts = [[1900.0, 2200.0, 94.4]] * 30, [[1300.0, 718.0, 94.1]] * 15
    calibration = [2406.2] * 15
    note, problem = judge_bracketed_claims(claims, brackets, calibration, BRACKET_SLACK_US, staged, calibration_staged,
                                           staged_parts=parts, calibration_staged_parts=calibration_parts)
    assert "work ran outside the timed region" in problem  # the excess is judged on the whole bracket still
    assert ("2112.1 us in the empty calls (inputs, poison, flush: 1900.0 / 2200.0 / 94.4 us in the timed calls, "
            "1300.0 / 718.0 / 94.1 us in the empty ones)") in note, note
    # rows of another length (an older runner's trace, a part unmeasured) name none
    short = judge_bracketed_claims(claims, brackets, calibration, BRACKET_SLACK_US, staged, calibration_staged,
                                   staged_parts=[[1.0, 2.0]] * 30, calibration_staged_parts=calibration_parts)[0]
    assert "inputs, poison, flush" not in short


def test_early_done_is_found_after_the_go_whatever_the_staging_took() -> None:
    claims, brackets = _calls(1.0, 252.5)  # the H200's early "done", with a staging of 150 us both ways
    staged, calibration_staged = [150.0] * 30, [150.0] * len(CALIBRATION)
    problem = judge_bracketed_claims(claims, brackets, CALIBRATION, BRACKET_SLACK_US, staged, calibration_staged)[1]
    assert "30 of 30 timed call(s)" in problem and "signalled done ahead" in problem
    # a staging that ran faster in the timed calls cannot cover for it either
    problem = judge_bracketed_claims(claims, brackets, CALIBRATION, BRACKET_SLACK_US, [100.0] * 30,
                                     calibration_staged)[1]
    assert "signalled done ahead" in problem


def test_work_hidden_beside_the_judges_staging_is_still_an_excess() -> None:
    # the runner's side stream slows the judge's copy by 300 us per call: on the whole bracket, an excess
    claims, brackets = _calls(139.0, 671.4 + 300.0)
    staged, calibration_staged = [450.0] * 30, [150.0] * len(CALIBRATION)
    problem = judge_bracketed_claims(claims, brackets, CALIBRATION, BRACKET_SLACK_US, staged, calibration_staged)[1]
    assert "work ran outside the timed region" in problem


def test_staging_figures_that_do_not_match_the_calls_are_not_used() -> None:
    claims, brackets = _calls(2310.2, 4361.5)
    note, problem = judge_bracketed_claims(claims, brackets, L1_4_CALIBRATION, BRACKET_SLACK_US, [4050.0] * 3,
                                           [4428.0] * 15)
    assert problem == "" and "own staging" not in note


# KernelBench L1/9 on the H200 (recheck of session 20, cudagym-v4, the reference as candidate): a 4 GiB output that
# the runner copies out after the go; the timed calls' copy ran 374 us (14%) faster than the empty calls'
L1_9_CALIBRATION = [3985.8 + 0.4 * (i % 5) - 0.8 for i in range(15)]
L1_9_CALIBRATION_STAGED = [1318.7] * 15


def test_a_faster_copy_out_of_a_large_output_does_not_make_an_honest_call_short() -> None:
    claims, brackets = _calls(2554.3, 3612.3)
    staged = [1319.3] * 30
    note, problem = judge_bracketed_claims(claims, brackets, L1_9_CALIBRATION, BRACKET_SLACK_US, staged,
                                           L1_9_CALIBRATION_STAGED)
    assert problem == "", problem
    assert "against 3985.8 us for an empty call" in note


def test_early_done_on_a_large_output_is_still_short() -> None:
    # "done" before the work and its copy-out: the bracket holds the judge's staging and little else
    claims, brackets = _calls(1.0, 1319.3 + 40.0)
    problem = judge_bracketed_claims(claims, brackets, L1_9_CALIBRATION, BRACKET_SLACK_US, [1319.3] * 30,
                                     L1_9_CALIBRATION_STAGED)[1]
    assert "30 of 30 timed call(s)" in problem and "signalled done ahead" in problem
    # half the copy-out skipped: short by about half the empty call's path, beyond the fifth allowed
    claims, brackets = _calls(2554.3, 1319.3 + 1333.5)
    problem = judge_bracketed_claims(claims, brackets, L1_9_CALIBRATION, BRACKET_SLACK_US, [1319.3] * 30,
                                     L1_9_CALIBRATION_STAGED)[1]
    assert "signalled done ahead" in problem


def test_the_wait_for_a_queued_call_is_the_default_unless_a_probe_sets_it() -> None:
    def with_extra(**extra: object) -> float:
        return arm_wait_s(dataclasses.replace(DEFAULT_PROTOCOL, extra=dict(extra)))

    assert with_extra() == DEFAULT_PROTOCOL.arm_wait_ms / 1000 == 0.25 and ARM_WAIT_S == 0.005
    assert with_extra(arm_wait_ms=200) == 0.2
    assert with_extra(arm_wait_ms=0) == 0.001 and with_extra(arm_wait_ms=1000) == ARM_WAIT_MAX_S  # clamped
    with pytest.raises(ConfigError, match="arm_wait_ms"):  # the protocol says so when it is made
        with_extra(arm_wait_ms="long")


def test_late_calls_are_noted_by_kind_with_both_waits() -> None:
    from cudagym.judge.harness.claims import UNQUEUED_NOTE, unqueued_note

    assert unqueued_note({"calibrate": [0, 15], "timed": [0, 40]}, 0.25, 0.005) == ""
    note = unqueued_note({"calibrate": [0, 15], "reference": [101, 101], "timed": [40, 40]}, 0.25, 0.005)
    assert note.startswith(UNQUEUED_NOTE) and "reference 101 of 101, timed 40 of 40 (waited 250 ms for the first, " \
        "5 ms after" in note and "calibrate" not in note


# A forward that waits for the GPU inside (a sync mid-way), judged as its own candidate on the H200 under cudagym-v5
# (session 22): every call late, its bracket 139.1 us beyond its claim and an empty call's cost, 50.4 us allowed.
LATE_GAP = 674.4 + 139.1


def test_a_late_call_is_not_judged_by_its_gap_but_timed_by_the_bracket() -> None:
    from cudagym.judge.harness.claims import LATE_CHARGE_NOTE, late_charge_note
    from cudagym.judge.split.remote import late_charge

    claims, brackets = _calls(700.0, LATE_GAP)
    assert "work ran outside the timed region" in judge_bracketed_claims(claims, brackets, CALIBRATION)[1]
    note, problem = judge_bracketed_claims(claims, brackets, CALIBRATION, late=[True] * 30)
    assert problem == "" and "30 of 30 call(s) not queued before the go" in note
    # it counts its bracket less an empty call's cost: the 139 us its host left the GPU waiting are in its time
    counted = [late_charge(c, b, 674.4) for c, b in zip(claims, brackets, strict=True)]
    assert all(x - c == pytest.approx(139.1, abs=1.3) for x, c in zip(counted, claims, strict=True))
    text = late_charge_note({"reference": [(700.0, 839.0)] * 3, "timed": list(zip(claims, counted, strict=True))},
                            674.4)
    assert text.startswith(LATE_CHARGE_NOTE) and "an empty call's 674.4 us" in text
    assert "reference 3 call(s), median 839.0 us against a median claim of 700.0 us; timed 30 call(s)" in text
    assert late_charge_note({}, 674.4) == late_charge_note({"timed": []}, 674.4) == ""


def test_the_late_note_gives_the_runners_account_of_its_delivery_only_where_every_reading_is_whole() -> None:
    from cudagym.judge.harness.claims import late_charge_note

    counted = {"timed": [(935.5, 1233.8)] * 3}
    said = late_charge_note(counted, 337.2, {"timed": [[290.0, 250.0], [300.0, 260.0], [310.0, 240.0]]})
    assert said.endswith("the runner says its delivery after the forward (its end event to its done, median) took "
                         "timed 300.0 us on the GPU's clock, 250.0 us of host time"), said
    # a reply without the figures (-1.0 for each missing one) adds nothing: the count stands as it was
    assert late_charge_note(counted, 337.2, {"timed": [[-1.0, -1.0]] * 3}) == late_charge_note(counted, 337.2)
    # with the host time of the delivery's parts (the outputs queued, done, armed), their medians too
    parts = late_charge_note(counted, 337.2, {"timed": [[290.0, 250.0, 20.0, 4.0, 3.0], [300.0, 260.0, 22.0, 5.0, 3.0],
                                                        [310.0, 240.0, 24.0, 6.0, 3.0]]})
    assert parts.endswith("timed 300.0 us on the GPU's clock, 250.0 us of host time (the outputs queued 22.0 us, "
                          "done 5.0 us, armed 3.0 us of it)"), parts
    partial = late_charge_note(counted, 337.2, {"timed": [[290.0, 250.0, -1.0, -1.0, -1.0]] * 3})
    assert partial == late_charge_note(counted, 337.2, {"timed": [[290.0, 250.0]] * 3})  # the whole only


def test_a_late_call_that_hides_work_from_its_claim_is_charged_that_work() -> None:
    from cudagym.judge.split.remote import late_charge

    # a claim forged to a twentieth: the bracket still holds the 700 us of work, and that is what counts
    claims, brackets = _calls(700.0, LATE_GAP)
    forged = [c / 20 for c in claims]  # the brackets are the judge's: the same work, whatever is claimed
    counted = [late_charge(c, b, 674.4) for c, b in zip(forged, brackets, strict=True)]
    assert min(counted) >= 700.0 + 139.0
    # a runner that writes its outputs into the arena and signals done itself, skipping its whole delivery, gains
    # only the empty call's path beyond the judge's staging, as an on-time call could: never its host's wait
    staging = 250.0
    skipped = [late_charge(c, staging + 700.0, 674.4) for c in forged]
    assert min(skipped) >= 700.0 - (674.4 - staging)
    # never less than the claim: a call noise left shorter than an empty one counts what it claims
    assert late_charge(3.0, 600.0, 674.4) == 3.0


def test_late_calls_do_not_excuse_a_forged_claim_on_the_calls_that_were_on_time() -> None:
    claims, brackets = _calls(7.0, 674.4 + 131.0)  # Swish's 138 us kernel claimed as 7 us ...
    late = [i % 3 == 0 for i in range(30)]  # ... with a third of its calls made late on purpose
    note, problem = judge_bracketed_claims(claims, brackets, CALIBRATION, late=late)
    assert "work ran outside the timed region" in problem and "10 of 30 call(s) not queued" in note


def test_early_done_is_found_on_late_calls_too() -> None:
    claims, brackets = _calls(1.0, 252.5)
    problem = judge_bracketed_claims(claims, brackets, CALIBRATION, late=[True] * 30)[1]
    assert "signalled done ahead" in problem


def test_late_calls_of_either_kind_count_against_the_calibration_and_are_recorded_by_kind() -> None:
    from cudagym.judge.split.remote import RunnerLink

    link = RunnerLink.__new__(RunnerLink)  # only the figures it keeps: no channel, no runner
    link.calibration_gap_us, link.late_counted_us = [], {}
    link.staged_us, link.last_staged_us = {"timed": [], "calibrate": []}, 0.0
    assert link.late_base_us == 0.0
    link.calibration_gap_us = list(CALIBRATION)
    assert link.late_base_us == pytest.approx(674.4)
    assert link.count_late("reference", 700.0, 1513.5) == pytest.approx(839.1)
    assert link.count_late("timed", 35.0, 1513.5) == pytest.approx(839.1)  # the same bracket, a forged claim
    assert link.late_counted_us == {"reference": [(700.0, pytest.approx(839.1))],
                                    "timed": [(35.0, pytest.approx(839.1))]}


def test_a_late_call_whose_inputs_copied_faster_than_in_the_calibration_is_counted_after_the_go() -> None:
    from cudagym.judge.split.remote import RunnerLink, late_charge

    # L1/4's 8 GiB set: the judge's copy 378 us slower in the calibration than in the timed calls
    link = RunnerLink.__new__(RunnerLink)
    link.calibration_gap_us, link.late_counted_us = list(L1_4_CALIBRATION), {}
    link.staged_us = {"timed": [], "calibrate": [4428.0] * 15}
    link.last_staged_us = 4050.0
    work, after_go, wait = 2310.2, 4739.1 - 4428.0, 139.0
    bracket = 4050.0 + after_go + work + wait
    # the whole bracket less the calibration's would drop the 378 us faster copy from the call's time
    assert late_charge(115.5, bracket, link.late_base_us) == pytest.approx(work + wait - 378.0, abs=1.0)
    assert link.count_late("timed", 115.5, bracket) == pytest.approx(work + wait, abs=1.0)
    # with the copy as fast as in the calibration, work hidden beside it slows it by 300 us: after the go alone
    # would miss that, the whole bracket holds it, and the larger reading stands
    base, staged = 4428.0 + after_go, 4428.0
    slowed = staged + 300.0 + after_go + work + wait
    assert late_charge(5.0, slowed, base, staged + 300.0, after_go) == pytest.approx(work + wait + 300.0)


def test_only_calls_whose_outputs_were_checked_confirm_a_claim() -> None:
    # White-box 22 on the GPU path: ten warm-up calls return at once (their outputs are never compared), so their
    # gaps are an empty call's; the thirty timed calls do Swish's work under a 7 us claim.
    warm_claims, warm_brackets = _calls(7.0, 674.4, n=10)
    claims, brackets = _calls(7.0, 674.4 + 131.0)
    all_claims, all_brackets = warm_claims + claims, warm_brackets + brackets
    assert judge_bracketed_claims(all_claims, all_brackets, CALIBRATION)[1] == ""  # every call trusted: vouched for
    checked = [False] * 10 + [True] * 30
    note, problem = judge_bracketed_claims(all_claims, all_brackets, CALIBRATION, checked=checked)
    assert "work ran outside the timed region" in problem
    assert "20th percentile of the 30 call(s) on time whose outputs were checked" in note


def test_a_few_checked_calls_judge_an_honest_claim_as_all_of_them_would() -> None:
    claims, brackets = _calls(139.0, 671.4)
    checked = [i in (0, 7, 19) for i in range(30)]  # PROFILE: round 0 and spot checks drawn one in ten
    note, problem = judge_bracketed_claims(claims, brackets, CALIBRATION, checked=checked)
    assert problem == ""
    assert "of the 3 call(s) on time" in note


def test_with_no_checked_call_on_time_no_gap_judges_the_claims_and_the_note_says_so() -> None:
    claims, brackets = _calls(139.0, 671.4, n=4)
    note, problem = judge_bracketed_claims(claims, brackets, CALIBRATION, late=[True, False, False, False],
                                           checked=[True, False, False, False])
    assert problem == ""
    assert "no call on time had its outputs compared" in note


def test_an_honest_on_time_call_counts_its_claim() -> None:
    from cudagym.judge.split.remote import on_time_charge

    base = 674.4
    assert on_time_charge(139.0, 139.0 + base + 3.0, base) == 139.0  # gaps of -6 to +3 us on the H200
    assert on_time_charge(139.0, 139.0 + base - 6.0, base) == 139.0


def test_claims_forged_in_three_calls_of_four_count_what_the_clock_showed() -> None:
    # The bracket rule judges the 20th percentile of the gaps: with one honest call in four it fell on an honest gap
    # while the median claim was a forged 1 us. Each call now counts at least what its bracket shows.
    from cudagym.judge.harness.stats import median
    from cudagym.judge.split.remote import on_time_charge

    base, real = 674.4, 139.0
    claims = [real if i % 4 == 0 else 1.0 for i in range(40)]
    brackets = [real + base + 0.2 * (i % 7) for i in range(40)]
    assert judge_bracketed_claims(claims, brackets, CALIBRATION)[1] == ""  # the percentile rule alone passes it
    counted = [on_time_charge(c, b, base) for c, b in zip(claims, brackets, strict=True)]
    assert median(counted) >= real  # all the clock showed: the allowance is for noise, not a forger's to keep


def test_a_slower_staging_here_than_in_the_calibration_charges_an_honest_call_nothing() -> None:
    from cudagym.judge.split.remote import on_time_charge

    # the calibration staged 274.4 us of its 674.4 us gap, this call 574.4 us: the whole bracket shows 300 us more
    # than the claim, after the go the call matches it
    base, after_go_base, staged = 674.4, 400.0, 574.4
    bracket = 139.0 + after_go_base + staged
    assert bracket - base > 139.0 + 200.0
    assert on_time_charge(139.0, bracket, base, staged, after_go_base) == 139.0
    assert on_time_charge(1.0, bracket, base, staged, after_go_base) > 100.0  # a forged claim there still counts


def test_the_spread_note_gives_each_kinds_excess_over_its_claims_and_says_nothing_without_calls() -> None:
    from cudagym.judge.harness.claims import SHOWN_SPREAD_NOTE, shown_spread_note

    reference = [(1000.0, 1000.0 + d) for d in (-2.0, 1.0, 3.0, 4.0, 30.0)]  # honest: a few us, one outlier
    timed = [(950.0, 1000.0)] * 4
    note = shown_spread_note({"timed": timed, "reference": reference, "late": []})
    assert note.startswith(SHOWN_SPREAD_NOTE)
    assert "timed 4 call(s): median 50.0, 90th percentile 50.0, most 50.0 us (the 90th percentile 5.26% of" in note
    assert "reference 5 call(s): median 3.0, 90th percentile 19.6, most 30.0 us (the 90th percentile 1.96%" in note
    assert "late" not in note
    assert shown_spread_note({}) == "" and shown_spread_note({"timed": []}) == ""


def test_a_claim_a_few_percent_short_of_the_clock_counts_the_clock_while_honest_noise_stands() -> None:
    # The charge's allowance was the bracket rule's 5% + 10 us: a forged timer could claim that much less than the
    # clock showed on every call, uncharged (an eager-speed copy then read 1.05x: tier 2). It is now 1% of the claim,
    # 1% of an empty call's path and 10 us; honest calls on the H200 stayed within 1% of their claims.
    from cudagym.judge.split.remote import on_time_allowance_us, on_time_charge

    base, real = 674.4, 1000.0
    assert on_time_allowance_us(real, base) == pytest.approx(10.0 + 6.744 + 10.0)
    forged = real * 0.97  # 3% short: inside the old 5% + 10 us
    assert on_time_charge(forged, real + base, base) == pytest.approx(real)
    assert on_time_charge(real, real + base + 15.0, base) == real  # 1.5% of noise: inside the allowance
    assert on_time_charge(real - 25.0, real + base, base) == real - 25.0  # a forger keeps the allowance at most
    # where the judge's staging is known, the path is an empty call's after its go
    assert on_time_charge(forged, real + base, base, staged_us=274.4, after_go_base_us=400.0) == pytest.approx(real)


# ------------------------------------------------------------- the runner's reference against the judge's clock
def _shown(claim: float, differs: float, n: int = 30) -> list[tuple[float, float]]:
    return [(claim + 0.1 * (i % 5), claim + differs + 0.2 * (i % 7)) for i in range(n)]


def test_a_reference_whose_claims_the_clock_contradicts_is_disputed() -> None:
    # KernelBench L1/72 on an H100 (session 35): the reference claimed 2,964.3 us, the clock showed 138 us less
    disputed = disputed_yardstick(_shown(2964.3, -138.0), 294.0)
    assert "30 on-time calls there -137.7 us from their claims" in disputed, disputed
    assert "allowed +-42.6 us" in disputed
    # the other way round too: a claim short of the clock is no yardstick either
    assert "+120.3 us" in disputed_yardstick(_shown(2964.3, 120.0), 294.0)


def test_a_reference_the_clock_agrees_with_is_not_disputed() -> None:
    # the sweep's honest references: within a few microseconds of the clock (L3/4_LeNet5: +3.5 us on 815.4 us)
    assert disputed_yardstick(_shown(815.4, 3.5), 300.0) == ""
    assert disputed_yardstick(_shown(2964.3, -30.0), 294.0) == ""  # within the 42.6 us allowance
    assert disputed_yardstick(_shown(2964.3, -138.0, n=4), 294.0) == ""  # too few calls on time to judge
    assert disputed_yardstick([], 294.0) == ""


def test_the_references_calls_are_read_against_the_calibration_that_stands() -> None:
    """KernelBench L2/1 on an H100: the reference's calls, read against the first calibration round (1,314.0 us),
    showed 308.6 us less than their claims; against the cheaper round taken after them (1,006.4 us), which stands,
    they agree."""
    import socket
    import time

    from cudagym.judge.split.channel import Channel
    from cudagym.judge.split.remote import RunnerLink

    a, b = socket.socketpair()
    link = RunnerLink(Channel(a), time.monotonic() + 60)
    try:
        link.calibration_gap_us[:] = [1314.0] * 10
        link.staged_us["calibrate"][:] = [712.4] * 10
        for i in range(30):
            link.last_staged_us = 712.0
            link.note_shown("reference", 9504.6, 9504.6 + 1006.4 + 0.1 * (i % 3))
        assert median([s - c for c, s in link.on_time_shown()["reference"]]) == pytest.approx(-307.5, abs=0.2)
        link.calibration_gap_us[:] = [1006.4] * 10  # the recalibration's cheaper round replaces the first
        shown = link.on_time_shown()["reference"]
        assert median([s - c for c, s in shown]) == pytest.approx(0.1, abs=0.2)
        assert disputed_yardstick(shown, link.on_time_path_us) == ""
        assert link.on_time_path_us == pytest.approx(1006.4 - 712.4)
    finally:
        link.close()
        b.close()
