"""One name normaliser for the KB, the pair corpora and the queries.

The paper lower-cases every name; we also fold Unicode compatibility forms and collapse
whitespace so that a name typed twice with different spacing is one entry, not two.
"""
from __future__ import annotations

import hashlib
import re
import string
import unicodedata
from typing import Dict, FrozenSet, Iterable, List, Optional

_WS = re.compile(r"\s+")
_PUNCT_RUN = re.compile(r"[\s{}]+".format(re.escape(string.punctuation)))


def normalize_name(text: str, lowercase: bool = True, strip_punctuation: bool = False) -> str:
    """NFKC, collapsed whitespace, stripped, lower-cased unless ``lowercase`` is False.

    ``strip_punctuation`` turns every run of ASCII punctuation into one space, as BioSyn's and
    SapBERT's query and dictionary cleaning does ("non-Hodgkin's" → "non hodgkin s").
    """
    text = unicodedata.normalize("NFKC", text)
    text = (_PUNCT_RUN if strip_punctuation else _WS).sub(" ", text).strip()
    return text.lower() if lowercase else text


# ---------------------------------------------------------------------------- word keys
# What the span finder and the linker's ranking compare words by: a mention and a name match
# word for word when their content words have the same keys ("tumours" and "Tumor").
WORD = re.compile(r"[^\W_]+")
# Function words: not counted when names are compared (the span finder lets some inside a
# mention, "abnormality of the hand", never at its edges).
STOPWORDS = frozenset(
    "a an and are as at be been but by during for from has have in into is it its no nor not of on or "
    "other such than that the their these this those to was were which with within without".split()
)
_BRITISH = (("aemia", "emia"), ("haem", "hem"), ("paed", "ped"), ("oedem", "edem"), ("oesoph", "esoph"),
            ("oestr", "estr"), ("foet", "fet"), ("coel", "cel"), ("diarrhoea", "diarrhea"), ("ischaem", "ischem"),
            ("leukaem", "leukem"), ("gynaec", "gynec"), ("orthopaed", "orthoped"), ("faec", "fec"), ("naev", "nev"),
            ("rrhoea", "rrhea"), ("pnoea", "pnea"), ("aesth", "esth"), ("aetiol", "etiol"), ("caec", "cec"),
            ("amoeb", "ameb"), ("sulph", "sulf"))
# "our" → "or" in tumour(s), tumourigenesis, behavioural, favoured, colouring; not four, hour, contour, resources
_BRITISH_OUR = re.compile(r"(?<=[a-z]{3})(?<!nt)our(?=s?\b|[ai]|e[dr]|ing|ful|less)")


def american_spelling(text: str) -> str:
    """``text`` lower-cased with British spellings made American ("anaemia" → "anemia",
    "tumours" → "tumors"): an encoder trained mostly on American text scores the British form of
    a name lower than the name itself."""
    t = text.lower()
    for british, american in _BRITISH:
        t = t.replace(british, american)
    return _BRITISH_OUR.sub("or", t)


def fold_accents(text: str) -> str:
    """``text`` without its accents ("café" → "cafe", "Sjögren" → "Sjogren"): ontologies mostly
    write names in ASCII ("Cafe-au-lait spot"), notes often do not."""
    if text.isascii():
        return text
    return "".join(c for c in unicodedata.normalize("NFKD", text) if not unicodedata.combining(c))


# plurals no suffix rule reaches: each maps to its singular, which then takes the rules as any word
_IRREGULAR_PLURALS = {"teeth": "tooth", "feet": "foot", "lenses": "lens", "children": "child", "women": "woman",
                      "men": "man", "mice": "mouse", "geese": "goose"}
_ROMAN = re.compile(r"(?:x{1,3}(?:ix|iv|v?i{0,3})|ix|iv|vi{0,3}|i{1,3})$")  # "viii", "xiv": no plural to take off
# Latin singulars in -ex/-ix (-ices) and -ux/-yx (-uces/-yces), keyed as their plurals lose the "s"
_LATIN_X = ((re.compile(r"[ei]x$"), "ice"), (re.compile(r"(?<=[uy])x$"), "ce"))


def word_key(word: str) -> str:
    """A lower-cased word reduced to the form its variants share: no accents, singular, American spelling.

    Applied to KB names and text alike, so the rules need only be consistent, not linguistically
    perfect ("tumours" → "tumor", "vertebrae" → "vertebra", "anaemia" → "anemia", "localised" →
    "localize", "café" → "cafe"; Latin plurals: "emboli" → "embolus", "hallux" and "halluces" →
    "halluce"; "teeth" → "tooth").
    """
    w = fold_accents(word.lower())
    w = _IRREGULAR_PLURALS.get(w, w)
    if len(w) <= 3 or w.isdigit() or _ROMAN.match(w):
        return w
    w = american_spelling(w)
    if w.endswith("ae") and len(w) > 5:
        w = w[:-1]
    elif w.endswith("ies") and len(w) > 4:
        w = w[:-3] + "y"
    elif w.endswith(("ches", "shes", "xes", "sses")):
        w = w[:-2]
    elif w.endswith(("oses", "yses", "stases")) and len(w) > 5:
        w = w[:-2] + "is"  # stenoses, paralyses, metastases; not diseases
    elif w.endswith("s") and not w.endswith(("ss", "us", "is")):
        w = w[:-1]  # also "kidneys", "delays": the singular ends in "y"
    elif w.endswith("i"):
        w = w[:-1] + "us"  # emboli, nevi, thrombi, nuclei, glomeruli (and "coli", "typhi": the same lemma)
    if w.endswith("x") and len(w) > 3:  # not "sex" of "sexes"
        for pattern, plural in _LATIN_X:  # hallux, cortex, index, cervix, varix, calyx; "reflex"/"reflexes" alike
            w = pattern.sub(plural, w)
    if w.endswith(("ised", "ising", "isation")):
        w = re.sub(r"is(ed|ing|ation)$", r"iz\1", w)
    return w


# Words that take each of ``word_key``'s rules: what an artifact of keys (a word-variant table) was made with
_KEY_PROBES = ("tumours", "anaemia", "vertebrae", "kidneys", "ovaries", "branches", "abscesses", "stenoses", "diseases",
               "emboli", "halluces", "cortex", "calyx", "teeth", "lenses", "viii", "localised", "café", "naevi",
               "orthopnoea", "paraesthesia", "sulphate", "sexes", "is", "2")


def word_key_fingerprint() -> str:
    """A short digest of what ``word_key`` makes of words that take each of its rules: a table of keys
    records it, and one made with other rules is refused rather than silently matching less."""
    return hashlib.sha256("\n".join(word_key(w) for w in _KEY_PROBES).encode()).hexdigest()[:16]


def content_keys(words: Iterable[str]) -> FrozenSet[str]:
    """The keys of the words that are not function words."""
    return frozenset(word_key(w) for w in words if w.lower() not in STOPWORDS)


def name_words(name: str, keys: Optional[Dict[str, str]] = None) -> List[str]:
    """A name's words as the span finder compares them: normalised, then ``word_key``; ``keys``, where
    given, remembers each word's key (many names over one table share most of their words)."""
    words = WORD.findall(normalize_name(name))
    if keys is None:
        return [word_key(w) for w in words]
    return [keys[w] if w in keys else keys.setdefault(w, word_key(w)) for w in words]
