"""Run labels (sim/labels.py): a repeated pass's number is stripped by one definition, which
the pass summary and the whole-network timing's run classes both use; a pass run's primitive
is made and split by one definition, which the debugger and the accuracy report read."""
from accel_codegen.sim import decompose
from accel_codegen.sim.labels import (is_pass_label, pass_kind, pass_primitive, run_label,
                                      split_pass_primitive)


def test_a_pass_primitive_splits_into_the_layers_primitive_and_the_role():
    made = pass_primitive("accel.layer_norm", "layer_norm.var.add2")
    assert split_pass_primitive(made) == ("accel.layer_norm", "layer_norm.var.add2")
    assert split_pass_primitive("accel.conv2d_bn_relu") == ("accel.conv2d_bn_relu", "")
    assert is_pass_label(run_label("f0.3p1", made))
    assert not is_pass_label(run_label("f0.3a", "accel.conv2d_bn", branch=True))


def test_pass_kind_strips_the_number_after_a_name_only():
    assert pass_kind("layer_norm.var.add2") == "layer_norm.var.add"
    assert pass_kind("softmax.newton.step12") == "softmax.newton.step"
    assert pass_kind("layer_norm.center") == "layer_norm.center"
    # digits not after a name are the role's own: a head's index inside, a bare number
    assert pass_kind("attention.h7.softmax.exp") == "attention.h7.softmax.exp"
    assert pass_kind("attention.7") == "attention.7"


def test_summary_merges_a_trees_levels():
    """A layer norm over 64 channels sums its squares in a halving tree (lo1, hi1, add1, lo2,
    ...): the summary has one row per kind of pass, each tree's levels counted in it."""
    passes = decompose.layer_norm_passes((1, 64, 1, 8))
    roles = [p.role for p in passes.passes]
    assert any(role != pass_kind(role) for role in roles), roles  # the tree is numbered
    _, runs = decompose.estimate_passes("nv_full", passes)
    text = decompose.summary(passes, runs)
    rows = [line.split("runs")[0].strip() for line in text.splitlines()]
    assert len(rows) == len(set(rows)) < len(roles)
    assert not any(char.isdigit() for row in rows for char in row.split(" [")[0]), rows
    assert sum(int(line.split("runs")[1].split()[0]) for line in text.splitlines()) == \
        len(roles)
