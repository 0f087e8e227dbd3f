"""The op vocabulary holds one row for each enumerator of accel.h, and nothing else."""
import pytest

from accel_codegen import AccelInvalidError
from accel_codegen._accel_ffi import ffi, lib
from accel_codegen.sim.vocabulary import FEATURES, TABLES


@pytest.mark.parametrize("table", TABLES, ids=lambda t: t.c_type)
def test_every_c_enumerator_has_exactly_one_row(table):
    sentinel = table.sentinel
    elements = dict(ffi.typeof(table.c_type).elements)  # value -> C name
    assert elements.pop(getattr(lib, sentinel)) == sentinel
    rows = [entry.c_name for entry in table]
    assert sorted(rows) == sorted(elements.values()), (rows, elements)
    assert len(set(rows)) == len(rows) == getattr(lib, sentinel)
    assert len(set(table.names)) == len(rows), "two rows share a name"
    for entry in table:
        assert table.code(entry.name) == entry.value and table.name_of(entry.value) == entry.name


def test_features_are_the_headers_bits():
    bits = [getattr(lib, c_name) for c_name in FEATURES.values()]
    assert sorted(bits) == [1 << i for i in range(len(bits))]


@pytest.mark.parametrize("table", TABLES, ids=lambda t: t.c_type)
@pytest.mark.parametrize("bad", ["nope", 1, ["relu"], 2.5])
def test_unknown_names_are_refused_by_name(table, bad):
    with pytest.raises(AccelInvalidError, match=table.what):
        table.code(bad)


def test_the_config_schema_is_the_c_structs():
    """AccelConfig has exactly the fields of the C accel_config, so a field added to accel.h
    cannot be silently 0 in Python or in generated code."""
    import dataclasses

    from accel_codegen import AccelConfig

    c_fields = [name for name, _ in ffi.typeof("accel_config").fields]
    assert [f.name for f in dataclasses.fields(AccelConfig)] == c_fields
