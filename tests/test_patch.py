"""coordinator.engine.patch: the CHAP JSON Patch vectors, the guards, and properties.

The reference's own ``apply_json_patch`` (chap-coordinator 0.3.3) is used as a
black-box oracle: for patches both implementations are meant to treat alike,
they must agree on the result or both refuse.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from chap_coordinator import PatchError as RefPatchError
from chap_coordinator import apply_json_patch as ref_apply
from hypothesis import given
from hypothesis import strategies as st

from coordinator.engine.patch import MAX_NODES, MAX_OPS, apply_patch
from coordinator.errors import PatchError

# The CHAP JSON Patch vectors, kept in tests/vectors so a fresh clone runs them.
VECTORS = json.loads((Path(__file__).parent / "vectors" / "json-patch-vectors.json").read_text())


# --- the shared vectors ------------------------------------------------------


@pytest.mark.parametrize("case", VECTORS["accept"], ids=lambda c: c["name"])
def test_vector_accept(case: dict[str, Any]) -> None:
    doc = copy.deepcopy(case["doc"])
    assert apply_patch(doc, case["patch"]) == case["expected"]
    assert doc == case["doc"]


@pytest.mark.parametrize("case", VECTORS["reject"], ids=lambda c: c["name"])
def test_vector_reject(case: dict[str, Any]) -> None:
    doc = copy.deepcopy(case["doc"])
    with pytest.raises(PatchError):
        apply_patch(doc, case["patch"])
    assert doc == case["doc"]


# --- the CHAP guards ---------------------------------------------------------


def refuse(doc: Any, ops: Any) -> PatchError:
    with pytest.raises(PatchError) as info:
        apply_patch(doc, ops)
    return info.value


@pytest.mark.parametrize("segment", ["__proto__", "constructor", "prototype"])
@pytest.mark.parametrize("op", ["add", "remove", "replace", "test", "move", "copy"])
def test_unsafe_segments_refused_everywhere(segment: str, op: str) -> None:
    doc = {segment: 1, "a": {segment: 2}}
    for pointer in (f"/{segment}", f"/a/{segment}"):
        ops = {"op": op, "path": pointer, "value": 1}
        if op in ("move", "copy"):
            refuse(doc, [{"op": op, "from": pointer, "path": "/b"}])
            refuse(doc, [{"op": op, "from": "/a", "path": pointer}])
        else:
            error = refuse(doc, [ops])
            assert segment in error.message and error.path == pointer


@pytest.mark.parametrize("segment", ["01", "1e1", "+1", "", " 1", "-1", "1.0", "0x1"])
def test_array_index_must_be_canonical_decimal(segment: str) -> None:
    error = refuse({"l": [1, 2, 3]}, [{"op": "replace", "path": f"/l/{segment}", "value": 9}])
    assert error.op_index == 0 and error.path == f"/l/{segment}"
    assert json.dumps(segment) in error.message


def test_dash_only_where_a_new_element_is_made() -> None:
    assert apply_patch({"l": [1]}, [{"op": "add", "path": "/l/-", "value": 2}]) == {"l": [1, 2]}
    assert apply_patch({"l": [1], "m": 3}, [{"op": "move", "from": "/m", "path": "/l/-"}]) == {"l": [1, 3]}
    for op in (
        {"op": "replace", "path": "/l/-", "value": 2},
        {"op": "remove", "path": "/l/-"},
        {"op": "test", "path": "/l/-", "value": 1},
        {"op": "copy", "from": "/l/-", "path": "/x"},
        {"op": "add", "path": "/l/-/x", "value": 1},
    ):
        refuse({"l": [1]}, [op])


def test_array_add_at_length_appends_and_past_it_is_refused() -> None:
    assert apply_patch({"l": [1]}, [{"op": "add", "path": "/l/1", "value": 2}]) == {"l": [1, 2]}
    refuse({"l": [1]}, [{"op": "add", "path": "/l/2", "value": 2}])


@pytest.mark.parametrize(
    ("stored", "probe"),
    [(True, 1), (False, 0), (1, True), (0, False), (None, False), ("1", 1), ([1], {"0": 1}), ({"a": True}, {"a": 1})],
)
def test_test_compares_json_types_strictly(stored: Any, probe: Any) -> None:
    error = refuse({"v": stored}, [{"op": "test", "path": "/v", "value": probe}])
    # Values are quoted as JSON and their JSON types named, never Python's.
    assert json.dumps(probe) in error.message and json.dumps(stored) in error.message
    assert "True" not in error.message and "None" not in error.message


@pytest.mark.parametrize(
    ("stored", "probe"), [(1, 1.0), (1.0, 1), ([1, {"x": 2}], [1.0, {"x": 2.0}]), (True, True), (None, None)]
)
def test_test_numbers_compare_by_value(stored: Any, probe: Any) -> None:
    assert apply_patch({"v": stored}, [{"op": "test", "path": "/v", "value": probe}]) == {"v": stored}


def test_test_failure_names_json_types() -> None:
    error = refuse({"b": True}, [{"op": "test", "path": "/b", "value": 1}])
    assert "boolean" in error.message and "number" in error.message


def test_operation_count_limit() -> None:
    noop = {"op": "test", "path": "", "value": {}}
    assert apply_patch({}, [noop] * MAX_OPS) == {}
    error = refuse({}, [noop] * (MAX_OPS + 1))
    assert error.data["limit"] == MAX_OPS and str(MAX_OPS + 1) in error.message


def test_node_limit_is_checked_after_each_op() -> None:
    # Every JSON value counts once: root + "a" + N elements + the new "b".
    at_limit = {"a": [0] * (MAX_NODES - 3)}
    assert apply_patch(at_limit, [{"op": "add", "path": "/b", "value": 1}])["b"] == 1
    over = {"a": [0] * (MAX_NODES - 2)}
    error = refuse(over, [{"op": "add", "path": "/b", "value": 1}])
    assert error.data["nodes"] == MAX_NODES + 1 and error.op_index == 0
    # A later op that shrinks it again does not rescue the patch.
    refuse(over, [{"op": "add", "path": "/b", "value": 1}, {"op": "remove", "path": "/b"}])
    # An empty patch applies no op, so there is nothing to check.
    assert apply_patch(over, []) == over


def test_copy_bomb_refused_at_the_op_that_crosses_the_limit() -> None:
    bomb = [{"op": "copy", "from": "/a", "path": "/a/-"}] * 20
    error = refuse({"a": [0]}, bomb)
    assert error.op_index == 15  # 2**17 + 1 values after the 16th copy


def test_remove_root_and_move_into_child_refused() -> None:
    refuse({"a": 1}, [{"op": "remove", "path": ""}])
    refuse({"a": {"b": 1}}, [{"op": "move", "from": "/a", "path": "/a/b/c"}])
    refuse({"a": {"b": 1}}, [{"op": "move", "from": "", "path": "/x"}])
    refuse({"a": {"b": 1}}, [{"op": "move", "from": "", "path": ""}])
    # A sibling whose name merely starts the same is not a child.
    assert apply_patch({"a": 1, "ab": {}}, [{"op": "move", "from": "/a", "path": "/ab/a"}]) == {"ab": {"a": 1}}
    # Moving onto itself is a no-op, but the location must exist.
    assert apply_patch({"a": 1}, [{"op": "move", "from": "/a", "path": "/a"}]) == {"a": 1}
    refuse({"a": 1}, [{"op": "move", "from": "/b", "path": "/b"}])


def test_root_operations() -> None:
    assert apply_patch({"a": 1}, [{"op": "add", "path": "", "value": [1]}]) == [1]
    assert apply_patch({"a": 1}, [{"op": "replace", "path": "", "value": "s"}]) == "s"
    assert apply_patch({"a": {"b": 1}}, [{"op": "move", "from": "/a", "path": ""}]) == {"b": 1}
    assert apply_patch({"a": 1}, [{"op": "copy", "from": "", "path": "/c"}]) == {"a": 1, "c": {"a": 1}}


@pytest.mark.parametrize(
    "op",
    [
        {"op": "frobnicate", "path": "/a"},
        {"path": "/a"},
        {"op": None, "path": "/a"},
        {"op": "ADD", "path": "/a", "value": 1},
        {"op": "add", "path": "/a"},
        {"op": "replace", "path": "/a"},
        {"op": "test", "path": "/a"},
        {"op": "copy", "path": "/a"},
        {"op": "move", "path": "/a"},
        {"op": "add", "value": 1},
        {"op": "add", "path": 5, "value": 1},
        {"op": "add", "path": "a", "value": 1},
        {"op": "add", "path": "/~2", "value": 1},
        {"op": "add", "path": "/a/x", "value": 1},
        {"op": "add", "path": "/b", "value": float("nan")},
        {"op": "add", "path": "/b", "value": {1, 2}},
        "add",
        1,
        None,
    ],
    ids=repr,
)
def test_malformed_operations_refused(op: Any) -> None:
    error = refuse({"a": 1}, [{"op": "test", "path": "/a", "value": 1}, op])
    assert error.op_index == 1


@pytest.mark.parametrize("ops", ["x", {"op": "add"}, None, 1])
def test_patch_must_be_an_array(ops: Any) -> None:
    assert "array" in refuse({"a": 1}, ops).message


def test_escapes() -> None:
    doc = {"a/b": {"c~d": 1}}
    assert apply_patch(doc, [{"op": "replace", "path": "/a~1b/c~0d", "value": 2}]) == {"a/b": {"c~d": 2}}
    # ~01 is "~1" literally, not "/": unescape ~1 before ~0 (RFC 6901 §4).
    assert apply_patch({"~1": 1}, [{"op": "remove", "path": "/~01"}]) == {}


def test_error_data_locates_the_failing_op() -> None:
    error = refuse(
        {"a": [1]},
        [{"op": "add", "path": "/b", "value": 1}, {"op": "remove", "path": "/a/3"}],
    )
    assert error.data == {"op_index": 1, "op": "remove", "path": "/a/3"}
    assert str(error).startswith("Operation 1:")


# --- properties --------------------------------------------------------------

KEYS = st.sampled_from(["a", "b", "c", "a/b", "~", "x~1", "", "0", "-"])
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**53) + 1, 2**53 - 1),
    st.text(max_size=4),
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(KEYS, inner, max_size=4)),
    max_leaves=20,
)
CONTAINERS = st.one_of(st.lists(JSON, max_size=4), st.dictionaries(KEYS, JSON, max_size=4))


def escape(segment: str) -> str:
    return segment.replace("~", "~0").replace("/", "~1")


def pointers(doc: Any, prefix: str = "") -> list[str]:
    """Every existing location in ``doc`` as a JSON Pointer, root first."""
    found = [prefix]
    if isinstance(doc, dict):
        for key, value in doc.items():
            found += pointers(value, f"{prefix}/{escape(key)}")
    elif isinstance(doc, list):
        for index, value in enumerate(doc):
            found += pointers(value, f"{prefix}/{index}")
    return found


@st.composite
def patches(draw: st.DrawFn, doc: Any) -> list[dict[str, Any]]:
    """Plausible patches: mostly pointing at real locations, sometimes not."""
    ops = []
    for _ in range(draw(st.integers(0, 6))):
        existing = pointers(doc)
        path = draw(st.one_of(st.sampled_from(existing), st.sampled_from(existing).map(lambda p: p + "/-"),
                              st.sampled_from(existing).map(lambda p: p + "/zz")))
        source = draw(st.sampled_from(existing))
        op = draw(st.sampled_from(["add", "remove", "replace", "move", "copy", "test"]))
        entry: dict[str, Any] = {"op": op, "path": path}
        if op in ("add", "replace"):
            entry["value"] = draw(JSON)
        elif op == "test":
            entry["value"] = draw(st.one_of(JSON, st.just(_at(doc, path))))
        elif op in ("move", "copy"):
            entry["from"] = source
        ops.append(entry)
    return ops


def _at(doc: Any, pointer: str) -> Any:
    try:
        return apply_patch(doc, [{"op": "copy", "from": pointer, "path": ""}])
    except PatchError:
        return None


@given(st.data())
def test_input_never_mutated_and_result_unshared(data: st.DataObject) -> None:
    doc = data.draw(CONTAINERS)
    ops = data.draw(patches(doc))
    doc_before, ops_before = copy.deepcopy(doc), copy.deepcopy(ops)
    try:
        result = apply_patch(doc, ops)
    except PatchError:
        result = None
    assert doc == doc_before and ops == ops_before
    # Mutating every container of the result must not reach the inputs.
    _scribble(result)
    assert doc == doc_before and ops == ops_before


def _scribble(value: Any) -> None:
    if isinstance(value, dict):
        for child in list(value.values()):
            _scribble(child)
        value["scribbled"] = True
    elif isinstance(value, list):
        for child in list(value):
            _scribble(child)
        value.append("scribbled")


@given(st.data())
def test_failing_patch_changes_nothing(data: st.DataObject) -> None:
    doc = data.draw(CONTAINERS)
    ops = data.draw(patches(doc))
    before = copy.deepcopy(doc)
    failing = ops + [{"op": "remove", "path": "/no-such-member/really-not"}]
    with pytest.raises(PatchError) as info:
        apply_patch(doc, failing)
    assert info.value.op_index is not None and doc == before


@given(CONTAINERS, st.data())
def test_add_then_remove_round_trips(doc: Any, data: st.DataObject) -> None:
    value = data.draw(JSON)
    if isinstance(doc, dict):
        key = data.draw(KEYS.filter(lambda k: k not in doc))
        pointer = "/" + escape(key)
    else:
        pointer = f"/{data.draw(st.integers(0, len(doc)))}"
    added = apply_patch(doc, [{"op": "add", "path": pointer, "value": value}])
    assert apply_patch(added, [{"op": "test", "path": pointer, "value": value}]) == added
    assert apply_patch(added, [{"op": "remove", "path": pointer}]) == doc


@given(st.data())
def test_agrees_with_the_reference(data: st.DataObject) -> None:
    doc = data.draw(CONTAINERS)
    ops = data.draw(patches(doc))
    try:
        ours: Any = apply_patch(doc, ops)
    except PatchError:
        ours = PatchError
    try:
        theirs: Any = ref_apply(copy.deepcopy(doc), copy.deepcopy(ops))
    except RefPatchError:
        theirs = PatchError
    assert ours == theirs
