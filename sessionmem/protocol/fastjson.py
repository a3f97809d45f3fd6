"""JSON for the hook hot path, straight from the ``_json`` C accelerator.

``import json`` costs a hook process ~9 ms, nearly all of it ``re`` (and ``enum``)
pulled in by ``json.decoder``/``json.encoder`` for their pure-Python fallbacks. The
C scanner and encoder that ``json`` itself uses need neither, so this module builds
them directly with the same settings as ``json.loads`` and ``json.dumps(...,
ensure_ascii=False, separators=(",", ":"))`` (compact, as the worker's msgspec
writes). Where ``_json`` is missing it simply uses ``json``.

Error handling:
    :func:`loads` raises ``ValueError`` (``json.JSONDecodeError`` for malformed text,
    imported only then) exactly where ``json.loads`` would; :func:`dumps` raises
    ``TypeError`` for values JSON cannot represent and ``ValueError`` for cycles.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

try:
    import _json
except ImportError:  # pragma: no cover - CPython always has it
    _json = None  # type: ignore[assignment]  # no module: the branches below test for None

_WHITESPACE = " \t\n\r"
_CONSTANTS = {"-Infinity": float("-inf"), "Infinity": float("inf"), "NaN": float("nan")}


class _DecoderSettings:
    """The attributes ``_json.make_scanner`` reads, as ``json.JSONDecoder()`` sets them."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int
    parse_constant = _CONSTANTS.__getitem__


def _not_serializable(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


if _json is not None:
    # typeshed asks for a JSONDecoder; the scanner reads only the attributes it has.
    _scan = _json.make_scanner(_DecoderSettings())  # type: ignore[arg-type]

    def loads(text: str | bytes) -> Any:
        if isinstance(text, (bytes, bytearray)):
            text = bytes(text).decode("utf-8-sig" if text[:3] == b"\xef\xbb\xbf" else "utf-8")
        start = len(text) - len(text.lstrip(_WHITESPACE))
        try:
            value, end = _scan(text, start)
        except StopIteration as stop:
            from json import JSONDecodeError

            raise JSONDecodeError("Expecting value", text, stop.value) from None
        except SystemError:
            # CPython 3.11's scanner reports malformed input through json.decoder,
            # which it only finds if already imported; otherwise it fails like this.
            # Let the standard module say what is wrong (slow path, bad input only).
            import json

            return json.loads(text)
        if text[end:].strip(_WHITESPACE):
            from json import JSONDecodeError

            raise JSONDecodeError("Extra data", text, end)
        return value

    def dumps(value: Any) -> str:
        encoder = _json.make_encoder({}, _not_serializable, _json.encode_basestring, None, ":", ",",
                                     False, False, True)
        return "".join(encoder(value, 0))

else:  # pragma: no cover
    import json as _stdlib_json

    def loads(text: str | bytes) -> Any:
        return _stdlib_json.loads(text)

    def dumps(value: Any) -> str:
        return _stdlib_json.dumps(value, ensure_ascii=False, separators=(",", ":"))
