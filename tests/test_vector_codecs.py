"""A Vector through msgspec and pydantic behaves like a list."""

from __future__ import annotations

from typing import Annotated, Any

import msgspec
import pydantic
import pytest

from statekernel import Vector, dec_hook, enc_hook

# -- msgspec -------------------------------------------------------------------------------


class Msg(msgspec.Struct, frozen=True):
    role: str
    text: str


class Thread(msgspec.Struct):
    log: Vector[int]
    messages: Vector[Msg] = msgspec.field(default_factory=Vector)
    loose: Vector = msgspec.field(default_factory=Vector)  # type: ignore[type-arg]


@pytest.mark.parametrize("proto", [msgspec.json, msgspec.msgpack])
@pytest.mark.parametrize("n", [0, 3, 33, 2_000])
def test_msgspec_round_trip_top_level(proto: Any, n: int) -> None:
    v = Vector(range(n))
    data = proto.encode(v, enc_hook=enc_hook)
    assert data == proto.encode(list(range(n)))  # a plain array on the wire
    back = proto.decode(data, type=Vector[int], dec_hook=dec_hook)
    assert type(back) is Vector and back == v
    bare = proto.decode(data, type=Vector, dec_hook=dec_hook)
    assert type(bare) is Vector and bare == v


@pytest.mark.parametrize("proto", [msgspec.json, msgspec.msgpack])
def test_msgspec_round_trip_in_struct(proto: Any) -> None:
    t = Thread(
        log=Vector(range(50)),
        messages=Vector([Msg("user", "hi"), Msg("assistant", "hello")]),
        loose=Vector([1, "a", None]),
    )
    data = proto.encode(t, enc_hook=enc_hook)
    back = proto.decode(data, type=Thread, dec_hook=dec_hook)
    assert back == t
    assert type(back.log) is Vector and type(back.messages) is Vector
    assert back.messages[1] == Msg("assistant", "hello")
    nested = proto.encode({"threads": [t], "v": Vector([Vector([1])])}, enc_hook=enc_hook)
    assert proto.decode(nested)["v"] == [[1]]


def test_msgspec_convert_and_to_builtins() -> None:
    t = Thread(log=Vector([1, 2]), messages=Vector([Msg("user", "x")]))
    raw = msgspec.to_builtins(t, enc_hook=enc_hook)
    assert raw == {"log": [1, 2], "messages": [{"role": "user", "text": "x"}], "loose": []}
    assert msgspec.convert(raw, Thread, dec_hook=dec_hook) == t
    msgs = msgspec.convert([{"role": "u", "text": "t"}], Vector[Msg], dec_hook=dec_hook)
    assert msgs == [Msg("u", "t")]
    assert msgspec.convert(Vector([1, 2]), Vector[int], dec_hook=dec_hook) == [1, 2]
    nested = msgspec.json.decode(b"[[1],[2,3]]", type=Vector[Vector[int]], dec_hook=dec_hook)
    assert nested == [[1], [2, 3]] and type(nested[1]) is Vector


def test_msgspec_decode_wrong_item_type_raises_validation_error() -> None:
    with pytest.raises(msgspec.ValidationError, match="Expected `int`, got `str`"):
        msgspec.json.decode(b'[1, "x"]', type=Vector[int], dec_hook=dec_hook)
    with pytest.raises(msgspec.ValidationError, match=r"\$\.log"):
        msgspec.json.decode(b'{"log": [1, "x"]}', type=Thread, dec_hook=dec_hook)
    with pytest.raises(msgspec.ValidationError, match="Expected `array`"):
        msgspec.json.decode(b'{"log": "abc"}', type=Thread, dec_hook=dec_hook)
    with pytest.raises(msgspec.ValidationError):
        msgspec.msgpack.decode(
            msgspec.msgpack.encode({"log": [], "messages": [{"role": 1}]}),
            type=Thread,
            dec_hook=dec_hook,
        )
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert([1, "x"], Vector[int], dec_hook=dec_hook)


def test_hooks_refuse_unknown_types() -> None:
    class Unknown:
        pass

    with pytest.raises(NotImplementedError, match="Unknown"):
        enc_hook(Unknown())
    with pytest.raises(NotImplementedError):
        msgspec.json.encode(Unknown(), enc_hook=enc_hook)
    with pytest.raises(NotImplementedError):
        dec_hook(Unknown, 1)


# -- pydantic ------------------------------------------------------------------------------


class PMsg(pydantic.BaseModel):
    role: str


class History(pydantic.BaseModel):
    steps: Vector[int]
    messages: Vector[PMsg] = Vector()


@pytest.mark.parametrize("steps", [[1, 2, 3], (1, 2, 3), Vector([1, 2, 3]), ["1", 2, 3]])
def test_pydantic_validates_items_from_list_tuple_or_vector(steps: Any) -> None:
    h = History.model_validate({"steps": steps, "messages": [{"role": "user"}]})
    assert type(h.steps) is Vector and h.steps == [1, 2, 3]
    assert type(h.messages) is Vector and h.messages == [PMsg(role="user")]


def test_pydantic_rejects_bad_items() -> None:
    with pytest.raises(pydantic.ValidationError):
        History.model_validate({"steps": ["x"]})
    with pytest.raises(pydantic.ValidationError):
        History.model_validate({"steps": [1], "messages": [{"nope": 1}]})
    with pytest.raises(pydantic.ValidationError):
        History.model_validate({"steps": 5})


def test_pydantic_round_trip() -> None:
    h = History(steps=Vector(range(40)), messages=Vector([PMsg(role="a"), PMsg(role="b")]))
    dumped = h.model_dump()
    assert dumped == {"steps": list(range(40)), "messages": [{"role": "a"}, {"role": "b"}]}
    assert type(dumped["steps"]) is list
    assert History.model_validate(dumped) == h
    assert History.model_validate_json(h.model_dump_json()) == h
    assert History.model_json_schema()["properties"]["steps"]["type"] == "array"


def test_pydantic_models_round_trip_through_the_codec_hooks() -> None:
    import pydantic

    class Note(pydantic.BaseModel):
        text: str
        tags: list[str] = []

    raw = msgspec.json.encode({"one": Note(text="a", tags=["x"])}, enc_hook=enc_hook)
    assert raw == b'{"one":{"text":"a","tags":["x"]}}'
    back = msgspec.json.decode(b'[{"text":"b"}]', type=Vector[Note], dec_hook=dec_hook)
    assert back == [Note(text="b")]
    with pytest.raises(msgspec.ValidationError, match="text"):
        msgspec.json.decode(b'{"text": 3}', type=Note, dec_hook=dec_hook)


# -- pydantic: a Vector[T] field behaves like a list[T] field ------------------------------


def _twin_models() -> tuple[Any, Any]:
    # Defined per test: pydantic builds a model's schema once, when the class is created.
    class Item(pydantic.BaseModel):
        role: str

    # An item type whose serialised form differs from the validated value.
    Tag = Annotated[int, pydantic.PlainSerializer(lambda x: f"#{x}", return_type=str)]

    class WithVector(pydantic.BaseModel):
        steps: Vector[int]
        items: Vector[Item] = Vector()
        loose: Vector = Vector()  # type: ignore[type-arg]
        tags: Vector[Tag] = Vector()

    class WithList(pydantic.BaseModel):
        steps: list[int]
        items: list[Item] = []
        loose: list = []  # type: ignore[type-arg]
        tags: list[Tag] = []

    return WithVector, WithList


_GOOD = [
    {"steps": [1, "2"], "items": [{"role": "user"}], "loose": [1, "a", None], "tags": [1, "2"]},
    {"steps": (3,), "items": ({"role": "a"}, {"role": "b"})},
    {"steps": []},
]


_BAD = [
    {"steps": ["x"]},
    {"steps": [1, None]},
    {"steps": 5},
    {"steps": "12"},
    {"steps": [1], "items": [{"nope": 1}]},
    {"steps": [1], "loose": 3},
    {"steps": [1], "tags": ["#1"]},
]


def _errors(model: type[pydantic.BaseModel], data: Any, **kw: Any) -> Any:
    try:
        return model.model_validate(data, **kw).model_dump()
    except pydantic.ValidationError as exc:
        return exc.errors(include_url=False)


@pytest.mark.parametrize("data", _GOOD + _BAD)
def test_pydantic_validates_like_list(data: dict[str, Any]) -> None:
    with_vector, with_list = _twin_models()
    assert _errors(with_vector, data) == _errors(with_list, data)
    if data in _GOOD:
        m = with_vector.model_validate(data)
        assert type(m.steps) is Vector and type(m.loose) is Vector
        assert all(type(x).__name__ == "Item" for x in m.items)


def test_pydantic_strict_mode_accepts_vectors() -> None:
    with_vector, with_list = _twin_models()
    m = with_vector.model_validate({"steps": Vector([1, 2]), "loose": Vector(["a"])}, strict=True)
    assert m.steps == [1, 2] and type(m.steps) is Vector
    assert m.loose == ["a"]
    for data in ({"steps": (1,)}, {"steps": ["1"]}, {"steps": [1]}):
        assert _errors(with_vector, data, strict=True) == _errors(with_list, data, strict=True)


def test_pydantic_serialises_and_describes_like_list() -> None:
    with_vector, with_list = _twin_models()
    data = _GOOD[0]
    v, lst = with_vector.model_validate(data), with_list.model_validate(data)
    dumped = v.model_dump()
    assert dumped == lst.model_dump()
    assert all(type(dumped[name]) is list for name in ("steps", "items", "loose", "tags"))
    assert v.model_dump_json() == lst.model_dump_json()
    plain = with_vector.model_validate(_GOOD[1])  # no tags: its dump is valid input again
    assert with_vector.model_validate_json(plain.model_dump_json()) == plain
    assert with_vector.model_validate(plain.model_dump()) == plain
    for mode in ("validation", "serialization"):
        schema = with_vector.model_json_schema(mode=mode)
        twin = with_list.model_json_schema(mode=mode)
        assert schema["properties"] == twin["properties"]
        assert schema.get("$defs") == twin.get("$defs")
    # A field assigned a plain sequence afterwards (no validate_assignment) still dumps as one.
    v.steps = (5, 6)
    assert v.model_dump()["steps"] == [5, 6] and type(v.model_dump()["steps"]) is list
    raw = with_vector.model_construct(steps=[7], items=(), loose=range(2), tags=(3,))
    assert raw.model_dump() == {"steps": [7], "items": [], "loose": [0, 1], "tags": ["#3"]}


def test_pydantic_type_adapter() -> None:
    ints = pydantic.TypeAdapter(Vector[int])
    assert ints.validate_python(["1", 2]) == [1, 2]
    assert ints.dump_python(Vector([1, 2])) == [1, 2]
    assert ints.dump_json(Vector([1, 2])) == pydantic.TypeAdapter(list[int]).dump_json([1, 2])
    with pytest.raises(pydantic.ValidationError):
        ints.validate_python([None])
    anything = pydantic.TypeAdapter(Vector)
    assert anything.validate_python(Vector([None, "a"])) == [None, "a"]
    assert anything.json_schema() == pydantic.TypeAdapter(list).json_schema()
