"""The pipelines' tokenizer: spaCy's own rules with a chunk cache sized for biomedical text, kept
in the config so that it survives saving and loading."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import spacy

from spacy_sapbert.pipelines import build_pipeline
from spacy_sapbert.records import ConceptRecord as R
from spacy_sapbert.tokenizer import CACHED_CHUNKS, create_tokenizer

TEXT = "Na(+)-K(+)-ATPase and 5-FU (5-fluorouracil), e.g. in xenon-133 studies; don't."


@pytest.fixture(scope="module")
def kb_path(kb_folder):
    return kb_folder([R("HP:1", "Seizure", ["Convulsion"]), R("HP:2", "Fever", ["Pyrexia"])])


def test_tokens_are_spacys_and_the_cache_is_larger():
    nlp = spacy.blank("en", config={"nlp": {"tokenizer": {"@tokenizers": "spacy_sapbert.Tokenizer.v1"}}})
    assert nlp.tokenizer.max_cache_size == CACHED_CHUNKS > spacy.blank("en").tokenizer.max_cache_size
    assert [t.text for t in nlp(TEXT)] == [t.text for t in spacy.blank("en")(TEXT)]
    with pytest.raises(ValueError, match="max_cache_size"):
        create_tokenizer(-1)


def test_built_pipelines_keep_the_cache_size_through_save_and_load(kb_path, tiny_bert_path, tmp_path):
    nlp = build_pipeline(kb_path, "ruler", encoder=tiny_bert_path, label="PHEN")
    assert nlp.tokenizer.max_cache_size == CACHED_CHUNKS
    nlp.to_disk(tmp_path / "pipeline")
    # a fresh process, which finds the tokenizer through the package's entry point
    code = ("import json, spacy, sys; nlp = spacy.load(sys.argv[1]); "
            "print(json.dumps([nlp.tokenizer.max_cache_size, [t.text for t in nlp(sys.argv[2])], [e.text for e in nlp(sys.argv[2]).ents]]))")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "pipeline"), "Pyrexia and a convulsion."],
                          capture_output=True, text=True, check=True)
    size, tokens, ents = json.loads(done.stdout.splitlines()[-1])
    assert size == CACHED_CHUNKS and tokens == ["Pyrexia", "and", "a", "convulsion", "."] and ents == ["Pyrexia", "convulsion"]


def test_the_shipped_ners_own_tokenizer_rules_are_kept(kb_path, tiny_bert_path):
    """``ner`` loads with its biomedical prefix and suffix rules, now with the larger cache."""
    from spacy_sapbert.pipelines import SHIPPED_NER

    ours = build_pipeline({"Disease": kb_path}, "ner", encoder=tiny_bert_path)
    assert ours.tokenizer.max_cache_size == CACHED_CHUNKS
    assert [t.text for t in ours.make_doc(TEXT)] == [t.text for t in spacy.load(SHIPPED_NER).make_doc(TEXT)]
    assert [t.text for t in ours.make_doc("xenon-133")] == ["xenon", "-", "133"]
