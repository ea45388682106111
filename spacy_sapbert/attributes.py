"""``Span._.<name>`` and ``Doc._.<name>`` extensions stored exactly where spaCy stores plain ones, marked as ours.

Stored in ``doc.user_data`` under spaCy's own keys, they travel with ``Doc.to_bytes``, ``DocBin`` and
``n_process`` like any extension. The mark lets us re-register our own attribute freely while refusing
to overwrite an attribute of the same name that another package registered. ``convert`` gives the
value one type however the doc travelled (serialisation turns tuples into lists).
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Tuple, Type, Union

from spacy.tokens import Doc, Span


class _Attribute:
    """One extension's getter and setter over ``doc.user_data`` (subclasses say where the value lives)."""

    def __init__(self, name: str, convert: Optional[Callable[[Any], Any]] = None):
        self.name = name
        self.convert = convert

    def _place(self, obj: Any) -> Tuple[Doc, tuple]:
        raise NotImplementedError

    def get(self, obj: Any) -> Any:
        doc, key = self._place(obj)
        value = doc.user_data.get(key)
        return value if self.convert is None or value is None else self.convert(value)

    def set(self, obj: Any, value: Any) -> None:
        doc, key = self._place(obj)
        doc.user_data[key] = value


class _SpanAttribute(_Attribute):
    def _place(self, span: Span) -> Tuple[Doc, tuple]:
        return span.doc, ("._.", self.name, span.start_char, span.end_char)


class _DocAttribute(_Attribute):
    def _place(self, doc: Doc) -> Tuple[Doc, tuple]:
        return doc, ("._.", self.name, None, None)


_KINDS = {Span: _SpanAttribute, Doc: _DocAttribute}


def register_attribute(owner: Union[Type[Span], Type[Doc]], name: str, convert: Optional[Callable[[Any], Any]] = None,
                       *, taken: str) -> None:
    """Register ``owner._.<name>`` (``owner``: ``Span`` or ``Doc``) unless another package already owns
    that name; then raise ``ValueError(taken)``, which tells the user which setting renames ours."""
    kind = _KINDS[owner]
    if owner.has_extension(name):
        getter = owner.get_extension(name)[2]
        if not isinstance(getattr(getter, "__self__", None), kind):
            raise ValueError(taken)
        if getter.__self__.convert is convert:
            return
    attr = kind(name, convert)
    owner.set_extension(name, getter=attr.get, setter=attr.set, force=True)


def register_span_attribute(name: str, convert: Optional[Callable[[Any], Any]] = None) -> None:
    """Register ``Span._.<name>`` (the linker's attributes) unless another package already owns that name."""
    register_attribute(Span, name, convert, taken=(
        f"Span extension '{name}' is already registered by another package. spacy-sapbert will not "
        f"overwrite it: choose other names with the component's 'cui_attr' / 'candidates_attr' settings."
    ))
