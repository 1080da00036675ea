"""The page predict.py --port serves at / (web_page.py): the view and form
chosen per signature, the label names read from the graph, the page's
escaping and headers; then the page itself in headless Chromium, typed
into and submitted with the keyboard, against a classifier, a tagger, a
question answering, a sentence-embedding and a fill-mask export served by
predict.py.

The browser tests need Debian's chromium and the playwright package
(requirements-test.txt); they skip where either is missing, unless
BERT_BROWSER_TESTS=required (as .ci/run sets), where they fail instead.
"""

import base64
import hashlib
import json
import os
import re
import shutil
import tempfile
import threading
import urllib.request

import numpy as np
import pytest
import tensorflow.compat.v1 as tf
from seqeval.metrics.sequence_labeling import get_entities
from tensorflow.core.protobuf import meta_graph_pb2

from scriptkit import attributions
from scriptkit import ner_tags
from scriptkit import exported_model
import modeling
from scriptkit import rest_server
from scriptkit import serving
import run_classifier
import run_ner
import serving_exports
import test_serving
from scriptkit import web_page

# The classifier's label names: one that is HTML, shown as text.
CLASSIFIER_LABELS = ["plain", "<b>bold</b>"]
# Tags the tagger can give (IOB2).
NER_TYPES = ["PER", "LOC"]
# Text that would run script if it were put into the page as HTML.
HOSTILE = ('Mara <img src=x onerror="window.ranScript=1"> Lind '
           '<script>window.ranScript=2</script> \U0001F600 went to Larkvale &amp; "Pine"')


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """SavedModels of random-headed tiny models: a pair classifier, a
    tagger, question answering (SQuAD 2.0), sentence embeddings (pairs
    taken) and fill-mask."""
    tmp = tmp_path_factory.mktemp("web_page")
    files = serving_exports.write_files(tmp / "model")
    config = modeling.BertConfig.from_json_file(files["config"])
    labels_path = str(tmp / run_ner.LABELS_FILE)
    run_ner.write_labels(labels_path, "iob2", NER_TYPES)
    made = {}
    for name, task in (("qa", "question_answering"), ("embedding", "sentence_embeddings"),
                       ("fill_mask", "fill_mask")):
        explain = ({"explain_steps": attributions.DEFAULT_STEPS}
                   if task in serving_exports.EXPLAINED else {})
        with tf.Graph().as_default():
            made[name], _ = serving_exports.EXPORTS[task](tmp / name, files, **explain)
    return dict(made, **{
        "classifier": run_classifier.export_model(
            serving.ExportSource(config, files["classifier"], str(tmp / "classifier"),
                                 files["vocab"], True,
                                 max_seq_length=test_serving.MAX_SEQ_LENGTH),
            run_classifier.MrpcProcessor(), CLASSIFIER_LABELS),
        "ner": run_ner.export_model(
            serving.ExportSource(config, files["ner"], str(tmp / "ner"), files["vocab"], True,
                                 max_seq_length=16),
            ner_tags.label_list_for(NER_TYPES, "iob2"), "iob2", labels_path, doc_stride=4)})


# ---------------------------------------------------------------------------
# The page's configuration, per signature.

def _meta_graph(build):
    """A MetaGraphDef whose serving_default is `build()`'s (inputs,
    outputs), built in a new graph."""
    with tf.Graph().as_default() as graph:
        inputs, outputs = build()
        meta_graph = meta_graph_pb2.MetaGraphDef()
        meta_graph.graph_def.CopyFrom(graph.as_graph_def())
        meta_graph.signature_def[web_page.SIGNATURE].CopyFrom(
            tf.saved_model.predict_signature_def(inputs, outputs))
    return meta_graph


def _classifier_outputs(processor, labels, texts=("text_a",)):
    """run_classifier.py's text signature outputs on a placeholder
    model."""
    def build():
        inputs = {name: tf.placeholder(tf.string, [None], name=name) for name in texts}
        name = "scores" if processor.is_regression else "probabilities"
        shape = [None] if processor.is_regression else [None, len(labels)]
        predictions = {name: tf.placeholder(tf.float32, shape)}
        return inputs, run_classifier._text_outputs(predictions, processor, labels)
    return build


class _MultiLabel(run_classifier.ColaProcessor):
    is_multi_label = True
    text_pairs = False


def _fields(config):
    return [(f["name"], f["kind"], f["optional"]) for f in config["fields"]]


def test_exports_get_their_view_fields_and_label_names(exports):
    meta_graph, types = web_page.read_export(exports["classifier"])
    config = web_page.page_config(meta_graph, "7", "mrpc")
    assert config["view"] == "classifier" and config["labels"] == CLASSIFIER_LABELS
    assert _fields(config) == [("text_a", "text", False), ("text_b", "text", True)]
    assert config["predict"] == "v1/models/mrpc:predict" and not config["unsupported"]
    assert config["explain"] == web_page.EXPLAIN_SIGNATURE == serving.EXPLAIN_SIGNATURE
    assert types == ()
    meta_graph, types = web_page.read_export(exports["ner"])
    config = web_page.page_config(meta_graph, "7", "ner", types)
    assert config["view"] == "tagger" and config["entity_types"] == NER_TYPES
    assert _fields(config) == [("text", "text", False)]
    for name, view, fields, inputs in [
            ("qa", "question_answering", [("question", "line", False),
                                          ("context", "text", False)], ["context", "question"]),
            ("embedding", "embedding", [("query", "line", False), ("texts", "lines", False)],
             ["text", "text_b"]),
            ("fill_mask", "fill_mask", [("text", "text", False)], ["text"])]:
        config = web_page.page_config(web_page.read_export(exports[name])[0], "1", name)
        assert (config["view"], _fields(config), config["inputs"]) == (view, fields, inputs)
        assert not config["unsupported"]


def test_classifier_kinds_and_other_signatures_get_their_views():
    labels = ["sport", "art", "news"]
    multi = web_page.page_config(_meta_graph(_classifier_outputs(_MultiLabel(), labels)),
                                 "1", "m")
    assert multi["view"] == "multi_label" and multi["labels"] == labels
    assert _fields(multi) == [("text_a", "text", False)]
    single = web_page.page_config(_meta_graph(_classifier_outputs(
        run_classifier.ColaProcessor(), labels)), "1", "m")
    assert single["view"] == "classifier" and single["labels"] == labels
    regression = web_page.page_config(_meta_graph(_classifier_outputs(
        run_classifier.StsbProcessor(), None, texts=("text_a", "text_b"))), "1", "m")
    assert regression["view"] == "regression" and regression["labels"] is None
    assert _fields(regression) == [("text_a", "text", False), ("text_b", "text", True)]

    def swag():  # run_swag.py's export, as docs/serving.md describes it
        inputs = {"context": tf.placeholder(tf.string, [None], name="context"),
                  "question": tf.placeholder(tf.string, [None], name="question"),
                  "endings": tf.placeholder(tf.string, [None, None], name="endings")}
        probabilities = tf.placeholder(tf.float32, [None, None])
        return inputs, {"probabilities": probabilities,
                        "label_ids": tf.argmax(probabilities, axis=-1, output_type=tf.int32)}
    config = web_page.page_config(_meta_graph(swag), "1", "swag")
    assert config["view"] == "multiple_choice"
    assert _fields(config) == [("context", "text", False), ("question", "line", True),
                               ("endings", "lines", False)]

    def question_answering():  # Not SQuAD's outputs: a field per input, JSON out.
        inputs = {"question": tf.placeholder(tf.string, [None], name="question"),
                  "context": tf.placeholder(tf.string, [None], name="context")}
        return inputs, {"start": tf.placeholder(tf.int32, [None])}
    config = web_page.page_config(_meta_graph(question_answering), "1", "qa")
    assert config["view"] == "generic" and not config["unsupported"]
    assert _fields(config) == [("context", "text", True), ("question", "text", True)]

    def ids_only():
        inputs = {"input_ids": tf.placeholder(tf.int32, [None, None], name="input_ids")}
        return inputs, {"probabilities": tf.placeholder(tf.float32, [None, 2])}
    config = web_page.page_config(_meta_graph(ids_only), "1", "ids")
    assert config["view"] == "generic" and config["fields"] == []
    assert "input_ids are not texts" in config["unsupported"]


def test_label_names_are_the_one_constant_behind_the_labels_output():
    with tf.Graph().as_default() as graph:
        names = tf.constant(["a", "b", "c"])
        other = tf.constant(["x", "y", "z"])
        ids = tf.placeholder(tf.int32, [None])
        one = tf.gather(names, ids)
        # Either of two constants: no one answer.
        two = tf.where(tf.equal(ids, 0), tf.gather(names, ids), tf.gather(other, ids))
    graph_def = graph.as_graph_def()
    assert web_page.label_names(graph_def, one.name, 3) == ["a", "b", "c"]
    assert web_page.label_names(graph_def, one.name, 2) is None  # Not as many as labels.
    assert web_page.label_names(graph_def, two.name, 3) is None


def test_page_escapes_what_it_names_and_allows_only_its_own_script():
    config = web_page.page_config(_meta_graph(_classifier_outputs(
        run_classifier.ColaProcessor(), ["</script><script>alert(1)</script>", "b"])),
        '1"><i>', "m<i>&")
    page = web_page.render(config)
    assert page.count("<script") == 2 and page.count("</script>") == 2
    assert "<i>" not in page and "m&lt;i&gt;&amp;" in page
    embedded = page.split('<script type="application/json" id="page-config">')[1]
    assert json.loads(embedded.split("</script>")[0]) == config
    # The script builds elements from text only.
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert sink not in web_page.SCRIPT
    policy = web_page.CONTENT_SECURITY_POLICY
    assert "default-src 'none'" in policy and "unsafe" not in policy
    assert web_page._source_hash(web_page.SCRIPT) in policy


# ---------------------------------------------------------------------------
# The page, served.

@pytest.fixture(scope="module")
def servers(exports):
    """name -> (URL, exported_model.Model) of predict.py's server of each export
    (the classifier's refuses requests over 2000 bytes)."""
    urls, running = {}, []
    for name, limit in (("classifier", 2000), ("ner", 1 << 20), ("qa", 1 << 20),
                        ("embedding", 1 << 20), ("fill_mask", 1 << 20)):
        model = exported_model.Model(os.path.dirname(exports[name]))
        http = rest_server.make_server(model, "127.0.0.1", 0, name, max_request_bytes=limit)
        threading.Thread(target=http.serve_forever, daemon=True).start()
        urls[name] = "http://127.0.0.1:%d/" % http.server_address[1], model
        running.append(http)
    yield urls
    for http in running:
        http.shutdown()
        http.server_close()


def test_server_answers_the_page_with_its_policy(servers):
    for path in ("", "index.html", "?from=link"):
        with urllib.request.urlopen(servers["ner"][0] + path, timeout=60) as response:
            assert response.status == 200
            assert response.headers["Content-Type"] == "text/html; charset=utf-8"
            assert (response.headers["Content-Security-Policy"]
                    == web_page.CONTENT_SECURITY_POLICY)
            body = response.read().decode("utf-8")
    assert '"view": "tagger"' in body and "v1/models/ner:predict" in body


def test_the_pages_policy_runs_its_own_script_and_style_and_loads_nothing_else(servers):
    """The Content-Security-Policy's every directive, against what it must
    say: its script and style by the hashes of the served page's own
    inline elements, requests to this server only, nothing else loaded,
    no framing by other pages."""
    with urllib.request.urlopen(servers["classifier"][0], timeout=60) as response:
        headers, body = response.headers, response.read().decode("utf-8")
    (script,) = re.findall(r"<script>(.*?)</script>", body, flags=re.S)
    (style,) = re.findall(r"<style>(.*?)</style>", body, flags=re.S)

    def source(text):
        return "'sha256-%s'" % base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()

    directives = [directive.strip().split(" ", 1)
                  for directive in headers["Content-Security-Policy"].split(";")]
    assert dict(directives) == {
        "default-src": "'none'", "script-src": source(script), "style-src": source(style),
        "connect-src": "'self'", "img-src": "data:", "base-uri": "'none'",
        "form-action": "'none'", "frame-ancestors": "'none'"}
    assert len(directives) == 8  # Each once.
    assert (headers["X-Content-Type-Options"], headers["Referrer-Policy"]) == (
        "nosniff", "no-referrer")


# ---------------------------------------------------------------------------
# In Chromium.

# Offline and quiet (no updates, sync or first-run pages); as root in a
# container (no sandbox, no GPU, shared memory in /tmp).
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                 "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage"]


def _chromium():
    for name in ("chromium", "chromium-browser"):
        if shutil.which(name):
            return shutil.which(name)
    return None


@pytest.fixture(scope="module")
def browser():
    """A Chromium (Debian's, driven by Playwright) with a fresh profile."""
    required = os.environ.get("BERT_BROWSER_TESTS") == "required"
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        sync_playwright = None
    executable = _chromium()
    missing = ("the playwright package (requirements-test.txt)" if sync_playwright is None
               else "" if executable else "chromium (apt-get install chromium)")
    if missing:
        message = "the browser tests need %s" % missing
        if required:
            pytest.fail(message + " (BERT_BROWSER_TESTS=required)")
        pytest.skip(message)
    with tempfile.TemporaryDirectory() as profile, sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            profile, executable_path=executable, args=CHROMIUM_ARGS, headless=True,
            viewport={"width": 1000, "height": 800}, locale="en-US")
        yield context
        context.close()


@pytest.fixture
def page(browser):
    """A new tab, which records the console's errors and script errors."""
    tab = browser.new_page()
    tab.problems = []
    tab.on("console", lambda m: tab.problems.append(m.text) if m.type == "error" else None)
    tab.on("pageerror", lambda e: tab.problems.append(str(e)))
    yield tab
    tab.close()


def _no_problems(page, expected=()):
    """No script error and no console error but `expected` substrings
    (a refused request's own line)."""
    assert [p for p in page.problems if not any(e in p for e in expected)] == []


def _bars(page):
    """[name, value shown, chosen, the bar's width in %] of each bar."""
    rows = page.eval_on_selector_all("#result .bar-row", """rows => rows.map(row => [
        row.querySelector('.name').textContent, row.querySelector('.value').textContent,
        row.classList.contains('chosen'), row.querySelector('.fill').style.width])""")
    return [row[:3] + [float(row[3].rstrip("%"))] for row in rows]


@pytest.mark.slow
def test_classifier_page_shows_each_label_and_errors(servers, page):
    url, model = servers["classifier"]
    page.goto(url)
    assert page.title() == "Text classification \u2014 classifier"
    # The fields' labels, then the explanation's choice of label.
    assert page.locator("label").all_inner_texts() == ["First text", "Second text (optional)",
                                                       "for"]
    # Typed into the focused first field, the second left empty; Ctrl+Enter sends.
    assert page.evaluate("document.activeElement.id") == "in-text_a"
    page.keyboard.type("the film is good")
    page.keyboard.press("Control+Enter")
    page.wait_for_selector("#result:not([hidden]) .bar-row")
    expected = model.signature("serving_default")({"text_a": ["the film is good"],
                                                   "text_b": [""]})
    probabilities = expected["probabilities"][0]
    bars = _bars(page)
    assert [row[:3] for row in bars] == [
        [name, "%.1f%%" % (100 * p), i == np.argmax(probabilities)]
        for i, (name, p) in enumerate(zip(CLASSIFIER_LABELS, probabilities))]
    np.testing.assert_allclose([row[3] for row in bars], 100 * probabilities, rtol=1e-6)
    assert page.inner_text("#result .headline") == "%s (%.1f%%)" % (
        CLASSIFIER_LABELS[np.argmax(probabilities)], 100 * probabilities.max())
    assert page.locator("#error").is_hidden()
    assert page.input_value("#in-text_a") == "the film is good"

    # While the answer loads, the inputs stay and the last result is marked stale.
    held = []
    page.route("**/v1/models/classifier:predict", lambda route: held.append(route))
    page.fill("#in-text_b", "a bad plot")
    page.click("#run")
    page.wait_for_selector("#run:disabled")
    assert page.get_attribute("#result", "class") == "stale"
    assert page.inner_text("#status") == "Running\u2026"
    assert (page.input_value("#in-text_a"), page.input_value("#in-text_b")) == (
        "the film is good", "a bad plot")
    held[0].continue_()
    page.wait_for_selector("#run:enabled")
    page.unroute("**/v1/models/classifier:predict")
    pair = model.signature("serving_default")({"text_a": ["the film is good"],
                                              "text_b": ["a bad plot"]})
    assert [row[1] for row in _bars(page)] == [
        "%.1f%%" % (100 * p) for p in pair["probabilities"][0]]

    # The server's error answer (a body over its limit) is shown as a message.
    page.fill("#in-text_a", "good " * 500)
    page.press("#in-text_a", "Control+Enter")
    page.wait_for_selector("#error:not([hidden])")
    assert page.inner_text("#error").startswith("The server answered 4")
    assert "exceeds the limit" in page.inner_text("#error")
    assert page.locator("#result").is_hidden()
    # An empty required field is refused before any request.
    page.fill("#in-text_a", "")
    page.press("#in-text_a", "Control+Enter")
    assert page.inner_text("#error") == "Write in \u201cFirst text\u201d first."
    # The inputs are kept for the next visit (this tab's session).
    page.fill("#in-text_a", "kept")
    page.reload()
    assert page.input_value("#in-text_a") == "kept"
    assert page.input_value("#in-text_b") == "a bad plot"
    _no_problems(page, expected=["status of 4"])


@pytest.mark.slow
def test_classifier_page_explains_a_label_word_by_word(servers, page):
    url, model = servers["classifier"]
    page.set_viewport_size({"width": 360, "height": 740})  # A phone's.
    page.goto(url)
    page.fill("#in-text_a", HOSTILE)
    page.fill("#in-text_b", "a bad plot")
    # The label to explain: the predicted one, or one of the labels (as text).
    assert page.eval_on_selector_all("#explain-label option", "o => o.map(x => x.textContent)"
                                     ) == ["the predicted label"] + CLASSIFIER_LABELS
    page.select_option("#explain-label", CLASSIFIER_LABELS[1])
    page.click("#explain")
    page.wait_for_selector("#result:not([hidden]) .explained")
    request = json.loads(page.text_content("#request").split("'")[1])
    assert request == {"signature_name": "explain", "instances": [
        {"text_a": HOSTILE, "text_b": "a bad plot", "label": CLASSIFIER_LABELS[1]}]}
    out = model.signature("explain")({"text_a": [HOSTILE], "text_b": ["a bad plot"],
                                      "label": [CLASSIFIER_LABELS[1]]})
    _assert_explained(page, out, [HOSTILE, "a bad plot"])
    assert page.inner_text("#result .headline") == (
        "What moved the probability of \u201c%s\u201d" % CLASSIFIER_LABELS[1])
    assert "for the probability" in page.inner_text("#result .legend")
    assert "against it" in page.inner_text("#result .legend")
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")

    # Predict still shows the probabilities; an error answer to Explain a message.
    page.click("#run")
    page.wait_for_selector("#result:not([hidden]) .bar-row")
    page.fill("#in-text_a", "good " * 500)
    page.click("#explain")
    page.wait_for_selector("#error:not([hidden])")
    assert page.inner_text("#error").startswith("The server answered 4")
    assert page.locator("#result").is_hidden()
    _no_problems(page, expected=["status of 4"])


@pytest.mark.slow
def test_tagger_page_highlights_entities_and_shows_html_as_text(servers, page):
    url, model = servers["ner"]
    page.set_viewport_size({"width": 360, "height": 740})  # A phone's.
    page.goto(url)
    page.locator("#in-text").type(HOSTILE)
    page.keyboard.press("Control+Enter")
    page.wait_for_selector("#result:not([hidden])")
    out = model.signature("serving_default")({"text": [HOSTILE]})
    n = out["num_words"][0]
    tags = [t.decode() for t in out["tags"][0, :n]]
    starts, ends = out["start_offsets"][0, :n], out["end_offsets"][0, :n]
    entities = get_entities(tags)  # conlleval's chunks: (type, first word, last word)
    assert entities, tags  # The random model tags something in this text.
    _assert_entities_shown(page, entities, starts, ends)
    rows = page.eval_on_selector_all("#result .entity-row", """rows => rows.map(r =>
        Array.from(r.cells, c => c.textContent))""")
    probabilities = out["probabilities"][0]
    assert rows == [[HOSTILE[starts[first]:ends[last]], kind, "%.1f%%" % (
        100 * probabilities[first:last + 1].max(axis=-1).mean()), "Explain"]
                    for kind, first, last in entities]
    # Nothing wider than the phone's screen.
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")

    # The random model tags (nearly) every word: the same answer with tags
    # made here, of IOB1, IOB2 and BIOES, and O between, on the markup's
    # words among others (whole tags between the entities).
    answer = json.loads(page.text_content("#answer"))
    pattern = ["O", "B-PER", "I-PER", "O", "S-LOC", "I-LOC", "E-LOC", "I-PER", "B-PER",
               "B-PER", "O", "I-LOC", "E-PER"]
    markup = [m.span() for m in re.finditer(r"<[^>]*>", HOSTILE)]
    made = ["O" if any(a <= start < b for a, b in markup) else pattern[i % len(pattern)]
            for i, start in enumerate(starts)]
    assert len(get_entities(made)) > 5
    answer["predictions"][0]["tags"] = made
    page.route("**/v1/models/ner:predict", lambda route: route.fulfill(
        status=200, content_type="application/json", body=json.dumps(answer)))
    page.click("#run")
    page.wait_for_selector("#run:enabled")
    _assert_entities_shown(page, get_entities(made), starts, ends)
    _no_problems(page)


def _assert_explained(page, out, texts):
    """The result shows the explain signature's answer `out` (of one
    instance) for `texts` (its text inputs, in order): each text as typed
    (HTML as text), its words marked with their signed attributions, for
    (blue) or against (orange, dashed), as strong as their share of the
    largest; and the strongest words listed."""
    n = out["num_words"][0]
    values = out["attributions"][0][:n]
    segments = out["segments"][0] if "segments" in out else np.zeros(n, np.int32)
    marks = page.eval_on_selector_all("#result mark.attribution", """marks => marks.map(m =>
        [m.textContent, m.title, m.className, m.style.getPropertyValue('--share')])""")
    assert [m[0] for m in marks] == [
        texts[t][b:e] for t, b, e in zip(segments, out["start_offsets"][0][:n],
                                         out["end_offsets"][0][:n])]
    assert [m[1] for m in marks] == [("+" if v >= 0 else "\u2212") + "%.4f" % abs(v)
                                     for v in values]
    assert [m[2] for m in marks] == ["attribution " + ("for" if v >= 0 else "against")
                                     for v in values]
    np.testing.assert_allclose([float(m[3]) for m in marks],
                               np.abs(values) / np.abs(values).max(), atol=1e-3)
    # The text around the words as typed (the markup shown, never run).
    shaded = page.eval_on_selector_all("#result .explained", "p => p.map(x => x.textContent)")
    assert shaded == [text for text in texts if text]
    assert page.locator("#result img, #result script, img").count() == 0
    assert page.evaluate("window.ranScript") is None
    strongest = page.eval_on_selector_all("#result .word-row", """rows => rows.map(r =>
        Array.from(r.cells, c => c.textContent))""")
    order = np.argsort(-np.abs(values), kind="stable")[:8]
    assert [row[0] for row in strongest] == [out["words"][0][i].decode() for i in order]


@pytest.mark.slow
def test_tagger_and_question_answering_pages_explain_their_answers(servers, page):
    url, model = servers["ner"]
    page.goto(url)
    page.fill("#in-text", HOSTILE)
    page.click("#run")
    page.wait_for_selector("#result:not([hidden]) .entity-row")
    out = model.signature("serving_default")({"text": [HOSTILE]})
    n = out["num_words"][0]
    (kind, first, last), *_ = get_entities([t.decode() for t in out["tags"][0, :n]])
    page.click("#result .entity-row .explain-entity")  # The first entity's.
    page.wait_for_selector("#result .explained")
    request = json.loads(page.text_content("#request").split("'")[1])
    assert request["instances"] == [{"text": HOSTILE, "first_word": first, "last_word": last}]
    explained = model.signature("explain")({"text": [HOSTILE], "first_word": [first],
                                            "last_word": [last]})
    _assert_explained(page, explained, [HOSTILE])
    starts, ends = out["start_offsets"][0], out["end_offsets"][0]
    assert page.inner_text("#result .headline") == (
        "What moved the tags of \u201c%s\u201d (%s\u2026)" % (
            HOSTILE[starts[first]:ends[last]], explained["tag"][0].decode()))
    _no_problems(page)

    url, model = servers["qa"]
    page.goto(url)
    page.fill("#in-question", "where did mara go?")
    page.fill("#in-context", HOSTILE)
    page.click("#explain")
    page.wait_for_selector("#result .explained")
    explained = model.signature("explain")({"question": ["where did mara go?"],
                                            "context": [HOSTILE]})
    _assert_explained(page, explained, ["where did mara go?", HOSTILE])
    answer = explained["answer"][0].decode()
    assert page.inner_text("#result .headline") == "What moved " + (
        "the answer \u201c%s\u201d (its start and end logits)" % answer if answer
        else "no answer (the start and end logits of [CLS])")
    # The context in its scrolling box.
    assert page.eval_on_selector_all("#result .explained.context", "p => p.length") == 1
    _no_problems(page)


def _assert_entities_shown(page, entities, starts, ends):
    """The tagger's result shows HOSTILE as text, with `entities` ((type,
    first word, last word), as seqeval reads the tags) marked."""
    marks = page.eval_on_selector_all("#result mark", """marks => marks.map(m => [
        m.firstChild.textContent, m.querySelector('.type').textContent])""")
    assert marks == [[HOSTILE[starts[first]:ends[last]], kind]
                     for kind, first, last in entities]
    # The text, less the type labels, is the input as typed; nothing of it ran.
    shown = page.evaluate("""() => {
        const copy = document.querySelector('#result .tagged').cloneNode(true);
        copy.querySelectorAll('.type').forEach(t => t.remove());
        return copy.textContent; }""")
    assert shown == HOSTILE
    assert page.locator("#result img, #result script, img").count() == 0
    assert page.evaluate("window.ranScript") is None


def _predict_route(page, model_name, answer):
    """Answers the page's next requests to `model_name` with `answer`."""
    page.route("**/v1/models/%s:predict" % model_name, lambda route: route.fulfill(
        status=200, content_type="application/json", body=json.dumps(answer)))


@pytest.mark.slow
def test_question_answering_page_marks_the_answer_in_its_context(servers, page):
    url, model = servers["qa"]
    page.goto(url)
    assert page.title() == "Question answering: the answer in its context \u2014 qa"
    # Question above context, both required.
    assert page.locator("label").all_inner_texts() == ["Question", "Context"]
    assert page.evaluate("document.activeElement.id") == "in-question"
    page.keyboard.press("Enter")  # Nothing typed: refused before any request.
    assert page.inner_text("#error") == "Write in \u201cQuestion\u201d first."
    question, context = "where did mara go?", HOSTILE
    page.fill("#in-question", question)
    page.fill("#in-context", context)
    page.press("#in-context", "Control+Enter")
    page.wait_for_selector("#result:not([hidden]) .bar-row")
    out = model.signature("serving_default")({"question": [question], "context": [context]})
    start, end = int(out["answer_start"][0]), int(out["answer_end"][0])
    answer = out["answer"][0].decode()
    # The random model may answer or not (SQuAD 2.0); either is shown as such.
    if start >= 0 and answer:
        assert page.inner_text("#result mark.answer") == context[start:end]
        assert page.inner_text("#result .headline") == "%s (%.1f%%)" % (
            answer, 100 * out["score"][0])
    else:
        assert page.locator("#result mark").count() == 0
    n = int(out["num_answers"][0])
    assert [row[:2] for row in _bars(page)] == [
        [a.decode() or "(no answer)", "%.1f%%" % (100 * p)]
        for a, p in zip(out["answers"][0][:n], out["answer_scores"][0][:n])]
    assert page.text_content("#result .context") == context  # HTML shown as text
    assert page.locator("#result img, #result script, img").count() == 0
    assert page.evaluate("window.ranScript") is None

    # A long context: it scrolls to an answer near its end.
    long_context = "The river runs past the mill. " * 80 + "Mara went to Larkvale."
    at = long_context.index("Larkvale")
    served = {"answer": "Larkvale", "answer_start": at, "answer_end": at + 8, "score": 0.75,
              "answers": ["Larkvale", "", "the mill"], "answer_scores": [0.75, 0.2, 0.05],
              "answer_starts": [at, -1, 24], "answer_ends": [at + 8, -1, 32],
              "num_answers": 3}
    _predict_route(page, "qa", {"predictions": [served]})
    page.fill("#in-context", long_context)
    page.click("#run")
    page.wait_for_selector("#run:enabled")
    assert page.inner_text("#result mark.answer") == "Larkvale"
    assert [row[:3] for row in _bars(page)] == [["Larkvale", "75.0%", True],
                                                ["(no answer)", "20.0%", False],
                                                ["the mill", "5.0%", False]]
    box = page.evaluate("""() => {
        const context = document.querySelector('#result .context');
        const mark = context.querySelector('mark').getBoundingClientRect();
        const frame = context.getBoundingClientRect();
        return [context.scrollTop, mark.top >= frame.top && mark.bottom <= frame.bottom]; }""")
    assert box[0] > 0 and box[1], box
    # SQuAD 2.0's no answer.
    page.unroute("**/v1/models/qa:predict")
    _predict_route(page, "qa", {"predictions": [dict(
        served, answer="", answer_start=-1, answer_end=-1, score=0.6)]})
    page.click("#run")
    page.wait_for_selector("#run:enabled")
    assert page.inner_text("#result .headline") == (
        "No answer: the model finds none in this context.")
    assert page.locator("#result mark").count() == 0
    # A long n-best: five in view, the others folded.
    page.unroute("**/v1/models/qa:predict")
    names = ["a%d" % i for i in range(7)]
    _predict_route(page, "qa", {"predictions": [dict(
        served, answers=names, answer_scores=[0.1] * 7, answer_starts=[0] * 7,
        answer_ends=[2] * 7, num_answers=7)]})
    page.click("#run")
    page.wait_for_selector("#result details.more")
    assert page.locator("#result > .bars .name").all_inner_texts() == names[:5]
    assert page.inner_text("#result details.more summary") == "2 more"
    assert [row[0] for row in _bars(page)] == names
    _no_problems(page)


@pytest.mark.slow
def test_embedding_page_ranks_the_texts_by_cosine_similarity(servers, page):
    url, model = servers["embedding"]
    page.goto(url)
    assert page.locator("label").all_inner_texts() == ["Query", "Texts"]
    query, texts = "the film is good", ["a good film", "<b>Larkvale</b> \U0001F600", "café"]
    page.fill("#in-query", query)
    page.fill("#in-texts", "\n".join(texts) + "\n\n")  # Blank lines are no texts.
    page.press("#in-texts", "Control+Enter")
    page.wait_for_selector("#result:not([hidden]) .bar-row")
    request = json.loads(page.text_content("#request").split("'")[1])
    assert request["instances"] == [{"text": t, "text_b": ""} for t in [query] + texts]
    vectors = model.signature("serving_default")(
        {"text": [query] + texts, "text_b": [""] * 4})["embedding"].astype(np.float64)
    similarity = vectors[1:] @ vectors[0] / (
        np.linalg.norm(vectors[1:], axis=1) * np.linalg.norm(vectors[0]))
    order = sorted(range(3), key=lambda i: -similarity[i])
    bars = _bars(page)
    assert [row[:3] for row in bars] == [[texts[i], "%.3f" % similarity[i], rank == 0]
                                         for rank, i in enumerate(order)]
    np.testing.assert_allclose([row[3] for row in bars],
                               [100 * max(0.0, similarity[i]) for i in order], rtol=1e-4)
    assert page.inner_text("#result .headline") == (
        "Most similar to the query: " + texts[order[0]])
    # One text: their one similarity.
    page.fill("#in-texts", texts[0])
    page.click("#run")
    page.wait_for_selector("#run:enabled")
    page.wait_for_function("document.querySelectorAll('#result .bar-row').length === 1")
    assert page.inner_text("#result .headline") == "Cosine similarity: %.3f" % similarity[0]
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    _no_problems(page)


@pytest.mark.slow
def test_fill_mask_page_fills_each_mask_and_hints_at_lower_case_masks(servers, page):
    url, model = servers["fill_mask"]
    page.set_viewport_size({"width": 360, "height": 740})  # A phone's.
    page.goto(url)
    text = "The [MASK] went to [MASK]. <i>[mask]</i>"  # Both masks in its 14 pieces.
    page.fill("#in-text", text)
    page.press("#in-text", "Control+Enter")
    page.wait_for_selector("#result:not([hidden]) .bar-row")
    out = model.signature("serving_default")({"text": [text]})
    assert page.inner_text("#result .filled") == out["filled"][0].decode()
    assert "[MASK], in capitals" in page.inner_text("#result .mask-hint")
    n = int(out["num_masks"][0])
    assert n == 2
    assert page.locator("#result .mask-title").all_inner_texts() == ["[MASK] 1", "[MASK] 2"]
    expected = [[token.decode(), "%.1f%%" % (100 * score), j == 0]
                for i in range(n)
                for j, (token, score) in enumerate(zip(out["tokens"][0][i],
                                                       out["scores"][0][i])) if token]
    assert [row[:3] for row in _bars(page)] == expected
    assert page.locator("#result i, img").count() == 0
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    # No mask: said so, and no hint.
    page.fill("#in-text", "no mask here")
    page.click("#run")
    page.wait_for_selector("#result:not([hidden]) .empty")
    assert page.inner_text("#result .empty") == "No [MASK] in the text to fill."
    assert page.locator("#result .mask-hint").count() == 0
    _no_problems(page)
