"""Did-you-mean hints (:mod:`seqdyn.core.names`)."""

from __future__ import annotations

from seqdyn.core.names import closest, did_you_mean


def test_the_closest_known_name_is_suggested_and_case_is_ignored():
    assert closest("seq_ln", ["num_kv_pairs", "seq_len", "vocab_size"]) == "seq_len"
    assert closest("D_MODEL", ["d_model", "layers"]) == "d_model"
    assert closest("colour", ["d_model", "layers"]) is None


def test_did_you_mean_names_the_first_misspelling_with_a_match_and_nothing_otherwise():
    known = ["state_dim", "head_dim", "expand"]
    assert did_you_mean(["zzz", "stat_dim"], known) == " (did you mean 'state_dim'?)"
    assert did_you_mean("zzz", known) == ""
    assert did_you_mean("expand", known) == ""  # a known name is not misspelled
