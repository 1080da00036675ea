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

  // A list of bars: rows of {name, value (0..1), chosen, shown (the value
  // as written; default a percentage)}.
  function bars(rows) {
    const list = el("ol", {className: "bars"});
    for (const row of rows) {
      const fill = el("span", {className: "fill"});
      fill.style.width = Math.max(0, Math.min(1, row.value)) * 100 + "%";
      list.append(el("li", {className: "bar-row" + (row.chosen ? " chosen" : "")},
                     el("span", {className: "name"}, row.name),
                     el("span", {className: "track"}, fill),
                     el("span", {className: "value"},
                        row.shown === undefined ? percent(row.value) : row.shown)));
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
    if (config.explain) table.tHead.rows[0].append(el("th", {}, ""));
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
      const row = el("tr", {className: "entity-row"}, el("td", {}, text),
                     el("td", {}, span.type),
                     el("td", {className: "value"}, percent(probability)));
      if (config.explain) {
        // Which words made this entity's tags (the explain signature).
        const why = el("button", {type: "button", className: "secondary explain-entity",
                                  title: "Which words made these tags"}, "Explain");
        why.addEventListener("click", () => run(true, {first_word: span.first,
                                                       last_word: span.last}));
        row.append(el("td", {}, why));
      }
      body.append(row);
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

  const SHOWN_ANSWERS = 5;  // of the n-best, before "more"

  // The answer marked in its context (offsets count code points), the
  // context scrolled to it, and the n-best list. SQuAD 2.0's "no answer"
  // is the empty answer at offset -1.
  function showAnswer(prediction, instance) {
    const chars = Array.from(instance.context);
    const start = prediction.answer_start;
    const end = prediction.answer_end;
    const found = prediction.answer !== "" && start >= 0 && end > start;
    const context = el("p", {className: "context"});
    const out = [];
    if (found) {
      const mark = el("mark", {className: "answer t0"}, chars.slice(start, end).join(""));
      context.append(chars.slice(0, start).join(""), mark, chars.slice(end).join(""));
      // Once shown: the answer a third of the way down a long context.
      context.afterShow = () => {
        context.scrollTop = Math.max(0, mark.offsetTop - context.clientHeight / 3);
      };
      out.push(el("p", {className: "headline"}, prediction.answer + " (" +
                  percent(prediction.score) + ")"));
    } else {
      context.append(instance.context);
      out.push(el("p", {className: "headline no-answer"},
                  "No answer: the model finds none in this context."));
    }
    out.push(context);
    const n = prediction.num_answers;
    const rows = [];
    for (let i = 0; i < n; i++) {
      const text = prediction.answers[i];
      rows.push({name: text === "" ? "(no answer)" : text,
                 value: prediction.answer_scores[i],
                 chosen: text === prediction.answer &&
                         prediction.answer_starts[i] === prediction.answer_start});
    }
    // The first few in view, the rest of the n-best folded below them.
    out.push(el("p", {className: "hint"}, "The best answers, with their probabilities:"),
             bars(rows.slice(0, SHOWN_ANSWERS)));
    if (rows.length > SHOWN_ANSWERS) {
      out.push(el("details", {className: "more"},
                  el("summary", {}, (rows.length - SHOWN_ANSWERS) + " more"),
                  bars(rows.slice(SHOWN_ANSWERS))));
    }
    return out;
  }

  function cosine(a, b) {
    let dot = 0;
    let aa = 0;
    let bb = 0;
    for (let i = 0; i < a.length; i++) {
      dot += a[i] * b[i];
      aa += a[i] * a[i];
      bb += b[i] * b[i];
    }
    return aa > 0 && bb > 0 ? dot / Math.sqrt(aa * bb) : 0;
  }

  // The texts ranked by the cosine similarity of their embeddings to the
  // query's (the first of the request's instances); a bar's length is the
  // similarity, from 0 (or less) to 1.
  function showSimilarities(prediction, instance, predictions) {
    const vectors = predictions.map((p) => (Array.isArray(p) ? p : p.embedding));
    const rows = instance.texts.map((text, i) => ({text: text,
                                                   similarity: cosine(vectors[0],
                                                                      vectors[i + 1])}));
    rows.sort((a, b) => b.similarity - a.similarity);
    const headline = rows.length === 1
      ? "Cosine similarity: " + rows[0].similarity.toFixed(3)
      : "Most similar to the query: " + rows[0].text;
    return [el("p", {className: "headline"}, headline),
            bars(rows.map((row, i) => ({name: row.text, value: row.similarity,
                                        shown: row.similarity.toFixed(3),
                                        chosen: i === 0})))];
  }

  // The text with each [MASK] filled by its best piece, then per mask its
  // likeliest pieces.
  function showFilled(prediction, instance) {
    const out = [el("p", {className: "headline filled"}, prediction.filled)];
    if (/\[mask\]/i.test(instance.text.replace(/\[MASK\]/g, ""))) {
      out.push(el("p", {className: "hint mask-hint"},
                  "A mask is written [MASK], in capitals: \u201c[mask]\u201d is read as " +
                  "text."));
    }
    const n = prediction.num_masks;
    if (!n) {
      out.push(el("p", {className: "empty"}, "No [MASK] in the text to fill."));
    }
    for (let i = 0; i < n; i++) {
      out.push(el("h2", {className: "mask-title"}, "[MASK] " + (i + 1)));
      const rows = [];
      prediction.tokens[i].forEach((token, j) => {
        if (token !== "") {
          rows.push({name: token, value: prediction.scores[i][j], chosen: j === 0});
        }
      });
      out.push(bars(rows));
    }
    return out;
  }

  // The words of each text shaded by their attributions (the explain
  // signature's), on a scale of two hues (blue for, orange against: told
  // apart without red and green) whose strength is the share of the
  // largest; the sign is written too (a word's title, the list), and a
  // word against the label is underlined dashed. Then the strongest
  // words, and how the attributions add up.
  const SHOWN_WORDS = 8;

  function showExplanation(prediction, instance) {
    const n = prediction.num_words;
    const values = prediction.attributions.slice(0, n);
    const largest = Math.max(1e-12, ...values.map(Math.abs));
    const fields = config.fields.map((field) => field.name);
    let explained = "the score";
    if (prediction.labels !== undefined) {
      explained = "the probability of \u201c" + prediction.labels + "\u201d";
    } else if (prediction.tag !== undefined) {
      const chars = Array.from(instance.text);
      explained = "the tags of \u201c" +
        chars.slice(prediction.start_offsets[instance.first_word],
                    prediction.end_offsets[instance.last_word]).join("") +
        "\u201d (" + prediction.tag + "\u2026)";
    } else if (prediction.answer !== undefined) {
      explained = prediction.answer === ""
        ? "no answer (the start and end logits of [CLS])"
        : "the answer \u201c" + prediction.answer + "\u201d (its start and end logits)";
    }
    const signed = (v) => (v >= 0 ? "+" : "\u2212") + Math.abs(v).toFixed(4);
    const out = [el("p", {className: "headline"}, "What moved " + explained),
                 el("p", {className: "hint explain-sum"},
                    "At this text " + Number(prediction.output).toFixed(4) +
                    "; with its words replaced by [PAD] " +
                    Number(prediction.baseline_output).toFixed(4) +
                    "; the words' attributions sum to " +
                    signed(values.reduce((sum, v) => sum + v, 0)) + ".")];
    const legend = el("p", {className: "legend"},
                      el("span", {className: "swatch for"}), " for " + explained + "  ",
                      el("span", {className: "swatch against"}), " against it (dashed)");
    out.push(legend);
    const texts = fields.length > 1 ? [0, 1] : [0];
    for (const t of texts) {
      const source = instance[fields[t]] || "";
      if (t > 0 && !source) continue;
      const chars = Array.from(source);  // Offsets count code points.
      // A question answering context scrolls (its long text in a box).
      const shaded = el("p", {className: "explained" +
                                         (config.view === "question_answering" && t > 0
                                           ? " context" : "")});
      let position = 0;
      for (let i = 0; i < n; i++) {
        if ((prediction.segments ? prediction.segments[i] : 0) !== t) continue;
        const start = prediction.start_offsets[i];
        const end = prediction.end_offsets[i];
        const share = values[i] / largest;
        const word = el("mark", {className: "attribution " + (share >= 0 ? "for" : "against"),
                                 title: signed(values[i])},
                        chars.slice(start, end).join(""));
        word.style.setProperty("--share", Math.abs(share).toFixed(3));
        shaded.append(chars.slice(position, start).join(""), word);
        position = end;
      }
      shaded.append(chars.slice(position).join(""));
      if (texts.length > 1) out.push(el("p", {className: "hint"}, config.fields[t].label));
      out.push(shaded);
    }
    const order = values.map((v, i) => i).sort((a, b) => Math.abs(values[b]) -
                                                         Math.abs(values[a]));
    const table = el("table", {className: "strongest"},
                     el("thead", {}, el("tr", {}, el("th", {}, "Word"),
                                         el("th", {className: "value"}, "Attribution"))));
    const body = el("tbody");
    for (const i of order.slice(0, SHOWN_WORDS)) {
      body.append(el("tr", {className: "word-row"}, el("td", {}, prediction.words[i]),
                     el("td", {className: "value"}, signed(values[i]))));
    }
    table.append(body);
    out.push(table);
    return out;
  }

  function showJson() {
    details.open = true;
    return [el("p", {className: "hint"}, "The answer is shown below as JSON.")];
  }

  // view -> (the first prediction, the form's values, all predictions) -> elements
  // for the result panel.
  const RENDERERS = {
    classifier: showProbabilities, multi_label: showProbabilities, regression: showScore,
    tagger: showEntities, multiple_choice: showChoices, generic: showJson,
    question_answering: showAnswer, embedding: showSimilarities, fill_mask: showFilled,
  };

  // The request's instances from the form's values: one instance of them,
  // but for embeddings, where the query and each text are one instance.
  function instancesFor(values) {
    if (config.view !== "embedding") return [values];
    const pairs = config.inputs.includes("text_b");
    return [values.query].concat(values.texts).map(
      (text) => (pairs ? {text: text, text_b: ""} : {text: text}));
  }

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

  // Predict, or with `explain` explain (`entity`: a tagger's entity, its
  // first_word and last_word).
  async function run(explain, entity) {
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
    const instances = instancesFor(instance);
    if (explain && labelChoice) instances[0] = Object.assign({label: labelChoice.value},
                                                             instances[0]);
    if (explain && entity) {
      instances[0] = Object.assign({}, instances[0], entity);
      Object.assign(instance, entity);
    }
    const request = {signature_name: explain ? config.explain : config.signature,
                     instances: instances};
    const url = new URL(config.predict, location.href).href;
    requestText.textContent = "curl -d " + shellQuote(JSON.stringify(request)) + " " +
                              shellQuote(url);
    const id = ++latest;
    button.disabled = true;
    if (explainButton) explainButton.disabled = true;
    result.classList.add("stale");
    result.setAttribute("aria-busy", "true");
    status.textContent = "Running\u2026";
    const started = performance.now();
    let message = "";
    let predictions = null;
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
        predictions = answer.predictions;
      }
    } catch (e) {
      if (id !== latest) return;
      message = "No answer from the server (" + e.message + ").";
    }
    button.disabled = false;
    if (explainButton) explainButton.disabled = false;
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
      const shown = (explain ? showExplanation : RENDERERS[config.view])(
        predictions[0], instance, predictions);
      result.replaceChildren(...shown);
      result.hidden = false;
      for (const node of shown) {
        if (node.afterShow) node.afterShow();
      }
    } catch (e) {
      details.open = true;
      showError("The answer could not be shown (" + e.message + "); it is below as JSON.");
    }
  }

  let explainButton = null;
  let labelChoice = null;

  // "Explain" beside "Predict" (the explain signature's words and their
  // attributions), and for a classifier the label to explain (question
  // answering explains its answer, regression its score).
  function addExplainControls() {
    explainButton = el("button", {type: "button", id: "explain", className: "secondary"},
                       "Explain");
    explainButton.addEventListener("click", () => run(true));
    const parts = [explainButton];
    if (config.view === "classifier" || config.view === "multi_label") {
      labelChoice = el("select", {id: "explain-label", title: "The label to explain"},
                       el("option", {value: ""}, "the predicted label"));
      for (const name of config.labels || []) {
        labelChoice.append(el("option", {value: name}, name));
      }
      parts.push(el("label", {htmlFor: "explain-label", className: "inline"}, "for"),
                 labelChoice);
    }
    button.after(...parts);
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
    // (A tagger explains an entity of its answer: a button per entity.)
    if (config.explain && config.view !== "tagger") addExplainControls();
    restore();
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      run(false);
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
