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
* otherwise ``generic``: a field per text input and the answer as JSON.

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
# page's view. The names are run_classifier.py's, run_ner.py's and
# run_swag.py's exports' (see serving.py).
VIEWS = (
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
      dict: view, title, model, version, signature, predict (the :predict
      URL, relative to the page), fields (see `_field`), labels (names in
      output order, or None), entity_types, unsupported (why the page
      cannot send this signature's inputs, or "").
    """
    config = {"model": model_name, "version": version, "signature": SIGNATURE,
              "predict": "v1/models/%s:predict" % model_name, "labels": None,
              "entity_types": list(entity_types), "fields": [], "unsupported": ""}
    if SIGNATURE not in meta_graph.signature_def:
        config.update(view=GENERIC_VIEW, title=TITLES[GENERIC_VIEW],
                      unsupported="The model has no %s signature." % SIGNATURE)
        return config
    signature_def = meta_graph.signature_def[SIGNATURE]
    shape = SignatureShape(signature_def)
    view = choose_view(signature_def)
    config.update(view=view, title=TITLES[view], fields=_fields(view, shape))
    not_text = sorted(name for name, (dtype, dims) in shape.inputs.items()
                      if dtype != types_pb2.DT_STRING or dims is None or len(dims) not in (1, 2))
    if not_text:
        config.update(fields=[], unsupported="The inputs %s are not texts: send them to the "
                      "REST API." % ", ".join(not_text))
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

STYLE = r"""
:root { color-scheme: light dark; --fg: #1d232b; --muted: #5b6572; --bg: #ffffff;
  --panel: #f3f5f8; --line: #d5dae1; --accent: #1f5fbf; --bar: #9bb8e6; --chosen: #1f5fbf;
  --error-bg: #fdecec; --error-fg: #8a1414; }
@media (prefers-color-scheme: dark) {
  :root { --fg: #e4e8ee; --muted: #a3adba; --bg: #14181d; --panel: #1e242c; --line: #38414d;
    --accent: #7fb0ff; --bar: #3d5f94; --chosen: #7fb0ff; --error-bg: #4a1d1d;
    --error-fg: #ffd2d2; }
}
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--fg);
  font: 16px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif; }
main, header, footer { max-width: 46rem; margin: 0 auto; padding: 0 1rem; }
header { padding-top: 1.25rem; }
h1 { font-size: 1.35rem; margin: 0; }
h1 code { font-size: 1.2rem; }
.sub, .hint, footer { color: var(--muted); font-size: 0.875rem; }
.sub { margin: 0.2rem 0 1rem; }
label { display: block; font-weight: 600; margin-top: 0.75rem; }
label .optional { font-weight: 400; color: var(--muted); }
textarea, input[type=text] { width: 100%; font: inherit; color: inherit; background: var(--bg);
  border: 1px solid var(--line); border-radius: 6px; padding: 0.5rem 0.6rem; }
textarea { min-height: 4.5rem; resize: vertical; }
textarea:focus, input:focus, button:focus-visible { outline: 2px solid var(--accent);
  outline-offset: 1px; }
.hint { margin: 0.15rem 0 0; }
.actions { display: flex; flex-wrap: wrap; align-items: center; gap: 0.75rem;
  margin: 1rem 0; }
button { font: inherit; font-weight: 600; color: #fff; background: var(--accent); border: 0;
  border-radius: 6px; padding: 0.5rem 1.25rem; cursor: pointer; }
button:disabled { opacity: 0.6; cursor: progress; }
#status { color: var(--muted); font-size: 0.875rem; }
#error { background: var(--error-bg); color: var(--error-fg); border-radius: 6px;
  padding: 0.6rem 0.8rem; margin: 0 0 1rem; white-space: pre-wrap; overflow-wrap: anywhere; }
#result { background: var(--panel); border-radius: 8px; padding: 0.75rem 1rem;
  margin-bottom: 1rem; overflow-wrap: anywhere; }
#result.stale { opacity: 0.55; }
.headline { font-size: 1.15rem; margin: 0 0 0.5rem; }
.bars { list-style: none; margin: 0; padding: 0; }
.bar-row { display: grid; grid-template-columns: minmax(5rem, 35%) 1fr 4rem; gap: 0.6rem;
  align-items: center; padding: 0.15rem 0; }
.bar-row .name { overflow-wrap: anywhere; }
.bar-row.chosen .name { font-weight: 700; }
.track { height: 0.9rem; background: var(--bg); border: 1px solid var(--line);
  border-radius: 4px; overflow: hidden; }
.fill { display: block; height: 100%; width: 0; background: var(--bar); }
.chosen .fill { background: var(--chosen); }
.value { text-align: right; font-variant-numeric: tabular-nums; }
.score { font-size: 2rem; font-weight: 700; margin: 0; font-variant-numeric: tabular-nums; }
.tagged { white-space: pre-wrap; font-size: 1.05rem; line-height: 2.1; margin: 0; }
mark { color: inherit; border-radius: 4px; padding: 0.1rem 0.2rem; }
mark .type { font-size: 0.7rem; font-weight: 700; margin-left: 0.3rem; padding: 0 0.25rem;
  border-radius: 3px; vertical-align: middle; background: rgba(0, 0, 0, 0.12); }
.t0 { background: #cfe3ff; } .t1 { background: #ffe2b8; } .t2 { background: #d4f2d2; }
.t3 { background: #f6d5f0; } .t4 { background: #fff3a6; } .t5 { background: #d9d6ff; }
.t6 { background: #c9f1ef; } .t7 { background: #ffd1d1; }
@media (prefers-color-scheme: dark) {
  .t0 { background: #23436f; } .t1 { background: #6b4a1c; } .t2 { background: #28502a; }
  .t3 { background: #5c2d55; } .t4 { background: #5c5417; } .t5 { background: #3d3772; }
  .t6 { background: #1e5552; } .t7 { background: #6e2a2a; }
  mark .type { background: rgba(255, 255, 255, 0.15); }
}
table { border-collapse: collapse; margin-top: 0.75rem; width: 100%; }
th, td { text-align: left; padding: 0.2rem 0.5rem 0.2rem 0; border-bottom: 1px solid var(--line);
  vertical-align: top; }
th, td.value { white-space: nowrap; overflow-wrap: normal; }
td.value { text-align: right; }
.empty { color: var(--muted); margin: 0.5rem 0 0; }
details { margin-bottom: 1rem; }
summary { cursor: pointer; color: var(--muted); }
pre { background: var(--panel); border-radius: 6px; padding: 0.6rem; overflow: auto;
  max-height: 20rem;
  font-size: 0.8rem; white-space: pre-wrap; overflow-wrap: anywhere; }
footer { padding-bottom: 1.5rem; }
"""

# The script builds every element with createElement and textContent (never
# from HTML text), so what a person types, the model's words and the
# server's messages are shown as text, never run.
SCRIPT = r"""
"use strict";
(function () {
  const config = JSON.parse(document.getElementById("page-config").textContent);
  const form = document.getElementById("form");
  const button = document.getElementById("run");
  const status = document.getElementById("status");
  const errorBox = document.getElementById("error");
  const result = document.getElementById("result");
  const details = document.getElementById("exchange");
  const requestText = document.getElementById("request");
  const answerText = document.getElementById("answer");
  const storageKey = "bert-page:" + config.model + ":" + config.view;

  // An element with properties and children (strings become text nodes).
  function el(tag, props, ...children) {
    const node = document.createElement(tag);
    Object.assign(node, props || {});
    for (const child of children) {
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function percent(p) {
    return (100 * p).toFixed(1) + "%";
  }

  // A list of bars: rows of {name, value (0..1), chosen}.
  function bars(rows) {
    const list = el("ol", {className: "bars"});
    for (const row of rows) {
      const fill = el("span", {className: "fill"});
      fill.style.width = Math.max(0, Math.min(1, row.value)) * 100 + "%";
      list.append(el("li", {className: "bar-row" + (row.chosen ? " chosen" : "")},
                     el("span", {className: "name"}, row.name),
                     el("span", {className: "track"}, fill),
                     el("span", {className: "value"}, percent(row.value))));
    }
    return list;
  }

  function labelName(i, prediction) {
    if (config.labels && i < config.labels.length) return config.labels[i];
    if (prediction.label_ids === i && typeof prediction.labels === "string") {
      return prediction.labels;
    }
    return "label " + i;
  }

  function showProbabilities(prediction) {
    const probabilities = prediction.probabilities;
    const ids = [].concat(prediction.label_ids).filter((i) => i >= 0);
    const names = probabilities.map((p, i) => labelName(i, prediction));
    let headline;
    if (config.view === "multi_label") {
      headline = ids.length
        ? "Labels at or over the threshold: " + ids.map((i) => names[i]).join(", ")
        : "No label reaches the threshold.";
    } else {
      headline = names[ids[0]] + " (" + percent(probabilities[ids[0]]) + ")";
    }
    return [el("p", {className: "headline"}, headline),
            bars(probabilities.map((p, i) => ({name: names[i], value: p,
                                               chosen: ids.includes(i)})))];
  }

  function showScore(prediction) {
    const score = typeof prediction === "number" ? prediction : prediction.scores;
    return [el("p", {className: "hint"}, "Score"),
            el("p", {className: "score"}, Number(score).toFixed(3))];
  }

  // Entity spans of a tag sequence: [{type, first, last}] (word indices).
  // A span starts at B- or S-, at a type change, or after O; E- and S-
  // close it (IOB1, IOB2 and BIOES alike).
  function entitySpans(tags) {
    const spans = [];
    let open = null;
    tags.forEach((tag, i) => {
      const dash = tag.indexOf("-");
      if (dash < 0) {
        open = null;
        return;
      }
      const prefix = tag.slice(0, dash);
      const type = tag.slice(dash + 1);
      if (open && open.type === type && (prefix === "I" || prefix === "E")) {
        open.last = i;
      } else {
        open = {type: type, first: i, last: i};
        spans.push(open);
      }
      if (prefix === "E" || prefix === "S") open = null;
    });
    return spans;
  }

  function showEntities(prediction, instance) {
    const chars = Array.from(instance.text);  // Offsets count code points.
    const n = prediction.num_words;
    const tags = prediction.tags.slice(0, n);
    const spans = entitySpans(tags);
    const types = config.entity_types.slice();
    const tagged = el("p", {className: "tagged"});
    const table = el("table", {},
                     el("thead", {}, el("tr", {}, el("th", {}, "Entity"), el("th", {}, "Type"),
                                         el("th", {className: "value"}, "Probability"))));
    const body = el("tbody");
    table.append(body);
    let position = 0;
    for (const span of spans) {
      if (!types.includes(span.type)) types.push(span.type);
      const start = prediction.start_offsets[span.first];
      const end = prediction.end_offsets[span.last];
      const words = prediction.probabilities.slice(span.first, span.last + 1);
      const probability = words.reduce((sum, p) => sum + Math.max(...p), 0) / words.length;
      const text = chars.slice(start, end).join("");
      const colour = "t" + (types.indexOf(span.type) % 8);
      tagged.append(chars.slice(position, start).join(""),
                    el("mark", {className: "entity " + colour,
                                title: span.type + " " + percent(probability)},
                       text, el("span", {className: "type"}, span.type)));
      body.append(el("tr", {className: "entity-row"}, el("td", {}, text),
                     el("td", {}, span.type),
                     el("td", {className: "value"}, percent(probability))));
      position = end;
    }
    tagged.append(chars.slice(position).join(""));
    if (!spans.length) {
      return [tagged, el("p", {className: "empty"}, "No entities found (" + n + " words).")];
    }
    return [tagged, table];
  }

  function showChoices(prediction, instance) {
    const question = instance.question ? instance.question + " " : "";
    return [el("p", {className: "headline"},
               question + instance.endings[prediction.label_ids]),
            bars(prediction.probabilities.map((p, i) => ({
              name: question + instance.endings[i], value: p,
              chosen: i === prediction.label_ids})))];
  }

  function showJson() {
    details.open = true;
    return [el("p", {className: "hint"}, "The answer is shown below as JSON.")];
  }

  // view -> (prediction, instance) -> elements for the result panel.
  const RENDERERS = {
    classifier: showProbabilities, multi_label: showProbabilities, regression: showScore,
    tagger: showEntities, multiple_choice: showChoices, generic: showJson,
  };

  function fieldValue(field) {
    const value = document.getElementById("in-" + field.name).value;
    if (field.kind !== "lines") return value;
    return value.split("\n").map((line) => line.trim()).filter((line) => line);
  }

  function save() {
    try {
      const values = {};
      for (const field of config.fields) {
        values[field.name] = document.getElementById("in-" + field.name).value;
      }
      sessionStorage.setItem(storageKey, JSON.stringify(values));
    } catch (e) {
      // Storage may be off; the fields still hold their text.
    }
  }

  function restore() {
    try {
      const values = JSON.parse(sessionStorage.getItem(storageKey) || "{}");
      for (const field of config.fields) {
        if (typeof values[field.name] === "string") {
          document.getElementById("in-" + field.name).value = values[field.name];
        }
      }
    } catch (e) {
      // Nothing kept, or storage is off.
    }
  }

  function showError(message) {
    errorBox.textContent = message;
    errorBox.hidden = false;
  }

  function shellQuote(text) {
    return "'" + text.replace(/'/g, "'\\''") + "'";
  }

  let latest = 0;  // Only the answer to the last request is shown.

  async function run() {
    const instance = {};
    for (const field of config.fields) {
      const value = fieldValue(field);
      if (!field.optional && !value.length) {
        showError("Write " + (field.kind === "lines" ? "at least one line in " : "in ") +
                  "\u201c" + field.label + "\u201d first.");
        document.getElementById("in-" + field.name).focus();
        return;
      }
      instance[field.name] = value;
    }
    save();
    const request = {signature_name: config.signature, instances: [instance]};
    const url = new URL(config.predict, location.href).href;
    requestText.textContent = "curl -d " + shellQuote(JSON.stringify(request)) + " " +
                              shellQuote(url);
    const id = ++latest;
    button.disabled = true;
    result.classList.add("stale");
    result.setAttribute("aria-busy", "true");
    status.textContent = "Running\u2026";
    const started = performance.now();
    let message = "";
    let prediction = null;
    try {
      const response = await fetch(url, {
        method: "POST", headers: {"Content-Type": "application/json"},
        body: JSON.stringify(request)});
      const text = await response.text();
      if (id !== latest) return;
      answerText.textContent = text;
      let answer = null;
      try {
        answer = JSON.parse(text);
      } catch (e) {
        answer = null;
      }
      if (answer && typeof answer.error === "string") {
        message = "The server answered " + response.status + ": " + answer.error;
      } else if (!response.ok || !answer || !Array.isArray(answer.predictions)) {
        message = "The server answered " + response.status + " " + response.statusText +
                  " without predictions.";
      } else {
        prediction = answer.predictions[0];
      }
    } catch (e) {
      if (id !== latest) return;
      message = "No answer from the server (" + e.message + ").";
    }
    button.disabled = false;
    result.classList.remove("stale");
    result.removeAttribute("aria-busy");
    status.textContent = message ? "" :
      "Answered in " + Math.round(performance.now() - started) + " ms.";
    errorBox.hidden = !message;
    errorBox.textContent = message;
    if (message) {
      result.hidden = true;  // The last result was not for these inputs.
      return;
    }
    try {
      result.replaceChildren(...RENDERERS[config.view](prediction, instance));
      result.hidden = false;
    } catch (e) {
      details.open = true;
      showError("The answer could not be shown (" + e.message + "); it is below as JSON.");
    }
  }

  function buildForm() {
    if (config.unsupported) {
      form.replaceChildren(el("p", {className: "empty"}, config.unsupported));
      return;
    }
    const fields = [];
    for (const field of config.fields) {
      const id = "in-" + field.name;
      const input = field.kind === "line"
        ? el("input", {type: "text", id: id, name: field.name, autocomplete: "off"})
        : el("textarea", {id: id, name: field.name, rows: field.kind === "lines" ? 4 : 3});
      input.spellcheck = false;
      input.addEventListener("input", save);
      const label = el("label", {htmlFor: id}, field.label);
      if (field.optional) label.append(" ", el("span", {className: "optional"}, "(optional)"));
      fields.push(label, input);
      if (field.hint) fields.push(el("p", {className: "hint"}, field.hint));
    }
    form.prepend(...fields);
    restore();
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      run();
    });
    // Ctrl+Enter (or Cmd+Enter) sends from a text area; Enter does in a line.
    form.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
        event.preventDefault();
        form.requestSubmit();
      }
    });
    if (config.fields.length) document.getElementById("in-" + config.fields[0].name).focus();
  }

  buildForm();
})();
"""

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
