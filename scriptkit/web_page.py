"""The page `predict.py --port` serves at ``/``: a form to try the served
model in a browser, fitted to its task.

The page is one self-contained HTML document (its style and script inline,
nothing loaded from elsewhere: the server may run offline). It posts to the
same ``:predict`` route as any client and shows the answer as the task
reads best; an ``{"error": ...}`` answer is shown as a message.

Which view the page takes is told from the export's ``serving_default``
signature (its inputs' and outputs' names, types and ranks) by `VIEWS`, the
first row that fits:

* ``classifier``: text_a (and text_b) in, probabilities and a label out:
  a bar per label, the chosen one marked;
* ``multi_label``: the same, labels [batch, labels]: the labels at or over
  the threshold marked;
* ``regression``: scores out: the score;
* ``tagger`` (run_ner.py): text in, words, tags and offsets out: the text
  with its entities highlighted and listed;
* ``multiple_choice`` (run_swag.py): context, question, endings in: a bar
  per ending;
* ``question_answering`` (run_squad.py): question and context in, the
  answer and its n-best out: the answer marked in its context (scrolled
  to), the n-best with their probabilities, "no answer" (SQuAD 2.0) said;
* ``embedding`` (extract_features.py): text in, an embedding out: a query
  and texts (one request of them all), the texts ranked by their cosine
  similarity to the query;
* ``fill_mask`` (run_pretraining.py): text in, the pieces of each
  ``[MASK]`` out: the text filled, and a bar per likely piece of each mask;
* otherwise ``generic``: a field per text input and the answer as JSON.

A classifier's, tagger's or question answering export's ``explain``
signature gets an "Explain" button (a classifier's with a choice of the
label; a tagger's beside each entity found): the texts with each word
shaded by how much it moved the label's probability (the score, the
entity's tags, the answer's start and end logits), for or against.

A new kind of export gets its own view by a row in `VIEWS` (and, in the
script, a renderer under the same name in RENDERERS).

The page gets what it needs as JSON inside it (`page_config`): the view,
the form's fields, the label names (which the signature does not name;
they are read from the graph, `label_names`), the model's name and its
``:predict`` URL.
"""

import base64
import functools
import hashlib
import html
import json
import os

from tensorflow.core.framework import types_pb2
from tensorflow.core.protobuf import saved_model_pb2

from scriptkit import file_io

# The paths the page is served at.
PATHS = ("/", "/index.html")
SIGNATURE = "serving_default"
# The signature of the "Explain" button (attributions.py; serving.py's
# EXPLAIN_SIGNATURE), and the views that have it.
EXPLAIN_SIGNATURE = "explain"
EXPLAINED_VIEWS = ("classifier", "multi_label", "regression", "question_answering", "tagger")


# ---------------------------------------------------------------------------
# Which view fits a signature.

class SignatureShape:
    """The names, types and ranks of a SignatureDef's tensors.

    Attributes:
      inputs, outputs: name -> (dtype enum of types_pb2, dims), dims a list of
        sizes (-1: any) or None for an unknown rank.
    """

    def __init__(self, signature_def):
        def describe(infos):
            return {name: (info.dtype, None if info.tensor_shape.unknown_rank
                           else [d.size for d in info.tensor_shape.dim])
                    for name, info in infos.items()}
        self.inputs = describe(signature_def.inputs)
        self.outputs = describe(signature_def.outputs)

    def rank(self, name):
        """The rank of the output (or else input) `name`; None if unknown or
        absent."""
        dtype, dims = self.outputs.get(name) or self.inputs.get(name) or (None, None)
        return None if dims is None else len(dims)

    def takes_texts(self, **ranks):
        """Whether the inputs are exactly these names, strings of these
        ranks (1: one text per example, 2: a list of texts)."""
        return set(self.inputs) == set(ranks) and all(
            self.inputs[name][0] == types_pb2.DT_STRING and self.rank(name) == rank
            for name, rank in ranks.items())

    def gives(self, *names):
        """Whether the outputs include all of `names`."""
        return set(names) <= set(self.outputs)


def _text_pair(shape):
    return shape.takes_texts(text_a=1) or shape.takes_texts(text_a=1, text_b=1)


# (view, test of a SignatureShape): the first row whose test passes is the
# page's view. The names are those of the scripts' exports (see
# serving.py, squad_export.py, fill_mask_export.py).
VIEWS = (
    ("question_answering", lambda s: s.takes_texts(question=1, context=1) and s.gives(
        "answer", "answer_start", "answer_end", "answers", "answer_scores", "num_answers")
        and s.rank("answers") == 2),
    ("fill_mask", lambda s: s.takes_texts(text=1) and s.gives(
        "tokens", "scores", "num_masks", "filled") and s.rank("tokens") == 3),
    ("embedding", lambda s: (s.takes_texts(text=1) or s.takes_texts(text=1, text_b=1))
        and s.gives("embedding") and s.rank("embedding") == 2),
    ("tagger", lambda s: s.takes_texts(text=1) and s.gives(
        "words", "tags", "start_offsets", "end_offsets", "num_words")
        and s.rank("tags") == 2),
    ("multiple_choice", lambda s: s.takes_texts(context=1, question=1, endings=2)
        and s.gives("probabilities", "label_ids") and s.rank("probabilities") == 2),
    ("regression", lambda s: _text_pair(s) and s.gives("scores") and s.rank("scores") == 1),
    ("multi_label", lambda s: _text_pair(s) and s.gives("probabilities", "label_ids")
        and s.rank("probabilities") == 2 and s.rank("label_ids") == 2),
    ("classifier", lambda s: _text_pair(s) and s.gives("probabilities", "label_ids")
        and s.rank("probabilities") == 2 and s.rank("label_ids") == 1),
)
GENERIC_VIEW = "generic"

TITLES = {"classifier": "Text classification",
          "multi_label": "Multi-label classification",
          "regression": "Regression: a score per text",
          "tagger": "Named entities: a tag per word",
          "multiple_choice": "Multiple choice: the likeliest ending",
          "question_answering": "Question answering: the answer in its context",
          "embedding": "Sentence embeddings: texts ranked by similarity",
          "fill_mask": "Fill-mask: the likeliest pieces for each [MASK]",
          GENERIC_VIEW: "The model's outputs"}


def choose_view(signature_def):
    """The name of the page's view for a SignatureDef (`VIEWS`)."""
    shape = SignatureShape(signature_def)
    return next((view for view, fits in VIEWS if fits(shape)), GENERIC_VIEW)


# ---------------------------------------------------------------------------
# The label names, from the graph.

# Ops that hand on a string value, and which of their inputs it comes from
# (the others are indices, conditions or shapes).
_VALUE_INPUTS = {"Identity": (0,), "GatherV2": (0,), "Gather": (0,), "Select": (1, 2),
                 "SelectV2": (1, 2), "Fill": (1,)}


def label_names(graph_def, tensor_name, num_labels):
    """The label names behind a signature's `labels` output: the string
    constant of `num_labels` values that output is gathered from (as
    run_classifier.py's export builds it), or None where there is no such
    one constant.

    Args:
      graph_def: the MetaGraph's GraphDef.
      tensor_name: the output's tensor ("GatherV2_28:0").
      num_labels: how many names to expect (the probabilities' last size).
    """
    nodes = {node.name: node for node in graph_def.node}
    found, todo, seen = [], [tensor_name], set()
    while todo:
        name = todo.pop().lstrip("^").split(":")[0]
        if name in seen or name not in nodes:
            continue
        seen.add(name)
        node = nodes[name]
        if node.op == "Const" and node.attr["dtype"].type == types_pb2.DT_STRING:
            tensor = node.attr["value"].tensor
            dims = [d.size for d in tensor.tensor_shape.dim]
            if dims == [num_labels] and len(tensor.string_val) == num_labels:
                found.append([v.decode("utf-8", "replace") for v in tensor.string_val])
        for index in _VALUE_INPUTS.get(node.op, ()):
            if index < len(node.input):
                todo.append(node.input[index])
    return found[0] if len(found) == 1 else None


# ---------------------------------------------------------------------------
# The page's configuration.

def _field(name, label, kind="text", optional=False, hint=""):
    """One form field: kind "text" (a text area), "line" (one line) or
    "lines" (a list of texts, one per line)."""
    return {"name": name, "label": label, "kind": kind, "optional": optional, "hint": hint}


def _fields(view, shape):
    """The form's fields for a view (see `_field`), in the signature's
    input order where the view has none of its own."""
    if view in ("classifier", "multi_label", "regression"):
        if "text_b" not in shape.inputs:
            return [_field("text_a", "Text")]
        return [_field("text_a", "First text"),
                _field("text_b", "Second text", optional=True,
                       hint="Leave empty to read the first text alone.")]
    if view == "tagger":
        return [_field("text", "Text", hint="Its words are tagged.")]
    if view == "multiple_choice":
        return [_field("context", "Context"),
                _field("question", "Start of the ending", kind="line", optional=True,
                       hint="Put in front of each ending; may be empty."),
                _field("endings", "Endings", kind="lines", hint="One per line.")]
    if view == "question_answering":
        return [_field("question", "Question", kind="line"),
                _field("context", "Context", hint="The answer is a span of this text.")]
    if view == "embedding":
        return [_field("query", "Query", kind="line"),
                _field("texts", "Texts", kind="lines",
                       hint="One per line, each ranked by its similarity to the query; "
                            "one text gives their one similarity.")]
    if view == "fill_mask":
        return [_field("text", "Text", hint="Write [MASK] where a word piece is missing: "
                                           "\u201cThe capital of France is [MASK].\u201d")]
    return [_field(name, name, kind="lines" if shape.rank(name) == 2 else "text",
                   optional=True, hint="One per line." if shape.rank(name) == 2 else "")
            for name in sorted(shape.inputs)]


def page_config(meta_graph, version, model_name, entity_types=()):
    """What the page's script needs, as a JSON-able dict: the view, form
    fields, label names, the model's name and URLs.

    Args:
      meta_graph: the SavedModel's MetaGraphDef (its serving_default
        signature and graph).
      version: the model's version, as the server names it.
      model_name: the model's name in the server's URLs.
      entity_types: a tagger's entity types (its label file's), coloured
        in this order.

    Returns:
      dict: view, title, model, version, signature, explain (the explain
      signature's name, where the export has one and the view shows its
      answer; else ""), predict (the :predict URL, relative to the page),
      fields (see `_field`), inputs (the signature's input names, sorted),
      labels (names in output order, or None), entity_types, unsupported
      (why the page cannot send this signature's inputs, or "").
    """
    config = {"model": model_name, "version": version, "signature": SIGNATURE,
              "explain": "", "predict": "v1/models/%s:predict" % model_name, "labels": None,
              "entity_types": list(entity_types), "fields": [], "inputs": [],
              "unsupported": ""}
    if SIGNATURE not in meta_graph.signature_def:
        config.update(view=GENERIC_VIEW, title=TITLES[GENERIC_VIEW],
                      unsupported="The model has no %s signature." % SIGNATURE)
        return config
    signature_def = meta_graph.signature_def[SIGNATURE]
    shape = SignatureShape(signature_def)
    view = choose_view(signature_def)
    config.update(view=view, title=TITLES[view], fields=_fields(view, shape),
                  inputs=sorted(shape.inputs))
    not_text = sorted(name for name, (dtype, dims) in shape.inputs.items()
                      if dtype != types_pb2.DT_STRING or dims is None or len(dims) not in (1, 2))
    if not_text:
        config.update(fields=[], unsupported="The inputs %s are not texts: send them to the "
                      "REST API." % ", ".join(not_text))
    if view in EXPLAINED_VIEWS and EXPLAIN_SIGNATURE in meta_graph.signature_def:
        config["explain"] = EXPLAIN_SIGNATURE
    if view in ("classifier", "multi_label"):
        num_labels = shape.outputs["probabilities"][1][-1]
        if num_labels > 0 and "labels" in signature_def.outputs:
            config["labels"] = label_names(meta_graph.graph_def,
                                           signature_def.outputs["labels"].name, num_labels)
    return config


def read_export(saved_model_dir):
    """(MetaGraphDef, entity types) of a SavedModel folder: its graph and
    signatures, and the types of run_ner.py's label file in assets.extra/
    (() where there is none, or it cannot be read: the page then colours
    types in the order it meets them)."""
    saved_model = saved_model_pb2.SavedModel()
    saved_model.ParseFromString(file_io.read_file_bytes(
        os.path.join(saved_model_dir, "saved_model.pb")))
    path = os.path.join(saved_model_dir, "assets.extra", "ner_labels.json")
    entity_types = ()
    if file_io.exists(path):
        try:
            entity_types = tuple(str(t) for t in json.loads(
                file_io.read_file_bytes(path))["entity_types"])
        except (ValueError, KeyError, TypeError):
            pass
    return saved_model.meta_graphs[0], entity_types


# ---------------------------------------------------------------------------
# The page.

def _asset(name):
    """The text of one of the page's files beside this module."""
    with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), name),
              encoding="utf-8") as f:
        return f.read()


STYLE = _asset("web_page.css")
# The script builds every element with createElement and textContent (never
# from HTML text), so what a person types, the model's words and the
# server's messages are shown as text, never run.
SCRIPT = _asset("web_page.js")

_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} \u2014 {model}</title>
<link rel="icon" href="data:,">
<style>{style}</style>
</head>
<body>
<header>
<h1>Try <code>{model}</code></h1>
<p class="sub">{title} \u00b7 version {version}</p>
</header>
<main>
<noscript><p>This page needs JavaScript; the REST API answers without it.</p></noscript>
<form id="form" autocomplete="off">
<div class="actions"><button id="run" type="submit">Predict</button>
<span class="hint">or Ctrl+Enter</span><span id="status" role="status"></span></div>
</form>
<div id="error" role="alert" hidden></div>
<section id="result" aria-live="polite" hidden></section>
<details id="exchange"><summary>Request and answer as JSON</summary>
<pre id="request"></pre><pre id="answer"></pre></details>
</main>
<footer>POST {predict} with <code>{{"instances": [...]}}</code>, as TensorFlow Serving
takes it; <code>v1/models/{model}/metadata</code> describes the signatures.</footer>
<script type="application/json" id="page-config">{config}</script>
<script>{script}</script>
</body>
</html>
"""


def _source_hash(text):
    """The CSP source of an inline element's text ('sha256-...')."""
    return "'sha256-%s'" % base64.b64encode(
        hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii")


# Scripts and styles run only if they are these; requests go to this server
# only; nothing else loads (no fonts, images, frames or form posts).
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src %s; style-src %s; connect-src 'self'; img-src data:; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    % (_source_hash(SCRIPT), _source_hash(STYLE)))


def _json_in_html(value):
    """JSON that cannot end the <script> element it stands in."""
    return (json.dumps(value, ensure_ascii=False, sort_keys=True)
            .replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026"))


def render(config):
    """The page (str) for a `page_config` dict."""
    def text(value):
        return html.escape(str(value), quote=True)
    return _PAGE.format(title=text(config["title"]), model=text(config["model"]),
                        version=text(config["version"]), predict=text(config["predict"]),
                        style=STYLE, script=SCRIPT, config=_json_in_html(config))


@functools.lru_cache(maxsize=8)
def page(saved_model_dir, version, model_name):
    """The HTTP answer to GET / for a served model: (body bytes, headers as
    (name, value) pairs). Built once per model."""
    meta_graph, entity_types = read_export(saved_model_dir)
    body = render(page_config(meta_graph, version, model_name, entity_types)).encode("utf-8")
    return body, (("Content-Type", "text/html; charset=utf-8"),
                  ("Content-Length", str(len(body))),
                  ("Content-Security-Policy", CONTENT_SECURITY_POLICY),
                  ("X-Content-Type-Options", "nosniff"),
                  ("Referrer-Policy", "no-referrer"),
                  ("Cache-Control", "no-cache"))
