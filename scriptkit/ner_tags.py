"""NER's tags: the tagging schemes (IOB1, IOB2/BIO, BIOES), their
conversions, the model's label list, and entity-level scores as the
CoNLL-2003 conlleval script counts them.

A tag is "O" or a prefix (B, I, E, S), "-" and an entity type ("B-PER").
In: tags as lists of str (one list per sentence). Out: tags, label lists,
entities and score dicts. Needs neither TensorFlow nor NumPy.
"""

from scriptkit.errors import InputError

SCHEMES = ("iob1", "iob2", "bioes")
PREFIXES = {"iob1": ("B", "I"), "iob2": ("B", "I"), "bioes": ("B", "I", "E", "S")}


def split_tag(tag):
    """'B-PER' -> ('B', 'PER'); 'O' -> ('O', ''). The type is everything after
    the first '-'. A tag without '-' other than 'O' gives (tag, '')."""
    if tag == "O":
        return "O", ""
    prefix, _, entity_type = tag.partition("-")
    return prefix, entity_type


def is_valid_tag(tag):
    """Whether `tag` is O or B-, I-, E-, S- followed by a type."""
    prefix, entity_type = split_tag(tag)
    return tag == "O" or (prefix in ("B", "I", "E", "S") and bool(entity_type))


def detect_scheme(tag_sequences):
    """The tagging scheme of some tag sequences (one per sentence).

    bioes if any E- or S- tag occurs; iob1 if an I- tag starts an entity
    (after O, another type, or at the start of a sentence), as in the
    original CoNLL-2003 files; otherwise iob2.
    """
    iob1 = False
    for tags in tag_sequences:
        previous = "O"
        for tag in tags:
            prefix, entity_type = split_tag(tag)
            if prefix in ("E", "S"):
                return "bioes"
            if prefix == "I":
                previous_prefix, previous_type = split_tag(previous)
                if previous_prefix == "O" or previous_type != entity_type:
                    iob1 = True
            previous = tag
    return "iob1" if iob1 else "iob2"


def iob1_to_iob2(tags):
    """IOB1 -> IOB2 for one sentence: an I- tag that starts an entity becomes B-."""
    out = []
    previous_prefix, previous_type = "O", ""
    for tag in tags:
        prefix, entity_type = split_tag(tag)
        if prefix == "I" and (previous_prefix == "O" or previous_type != entity_type):
            tag = "B-" + entity_type
        out.append(tag)
        previous_prefix, previous_type = prefix, entity_type
    return out


def iob2_to_iob1(tags):
    """IOB2 -> IOB1 for one sentence: B- stays only right after an entity of
    the same type (where IOB1 needs it), else it becomes I-."""
    out = []
    previous_prefix, previous_type = "O", ""
    for tag in tags:
        prefix, entity_type = split_tag(tag)
        if prefix == "B" and (previous_prefix == "O" or previous_type != entity_type):
            out.append("I-" + entity_type)
        else:
            out.append(tag)
        previous_prefix, previous_type = prefix, entity_type
    return out


def model_scheme(scheme):
    """The scheme the model is trained in: IOB1 data are trained as IOB2
    (every entity's first word gets B-, which is easier to learn than IOB1's
    rare B-), the others as they are."""
    return "iob2" if scheme == "iob1" else scheme


def to_model_tags(tags, scheme):
    """A sentence's tags in the data's scheme -> the model's scheme."""
    return iob1_to_iob2(tags) if scheme == "iob1" else list(tags)


def from_model_tags(tags, scheme):
    """A sentence's predicted tags in the model's scheme -> the data's scheme."""
    return iob2_to_iob1(tags) if scheme == "iob1" else list(tags)


def label_list_for(entity_types, scheme):
    """The model's labels: 'O', then per type (in the given order) its tags in
    the model's scheme: B-, I- (and E-, S- for bioes)."""
    labels = ["O"]
    for entity_type in entity_types:
        labels.extend("%s-%s" % (prefix, entity_type)
                      for prefix in PREFIXES[model_scheme(scheme)])
    return labels


def entity_types_of(tags):
    """Sorted entity types of some tags (invalid tags ignored)."""
    return sorted({split_tag(t)[1] for t in tags if t != "O" and is_valid_tag(t)})


def parse_labels_flag(value):
    """--labels: types or tags, comma-separated -> list of types in the order
    first given. Raises InputError for an empty list or a bad tag."""
    types = []
    for item in value.split(","):
        item = item.strip()
        if not item or item == "O":
            continue
        if "-" in item:
            if not is_valid_tag(item):
                raise InputError("--labels: %r is neither a type nor a tag such as B-PER"
                                 % item)
            item = split_tag(item)[1]
        if item not in types:
            types.append(item)
    if not types:
        raise InputError("--labels: no entity type in %r" % value)
    return types


def _chunk_ends(previous_prefix, previous_type, prefix, entity_type):
    """Whether an entity ends between the previous tag and this one."""
    if previous_prefix in ("E", "S"):
        return True
    if previous_prefix in ("B", "I") and prefix in ("B", "S", "O"):
        return True
    return previous_prefix != "O" and previous_type != entity_type


def _chunk_starts(previous_prefix, previous_type, prefix, entity_type):
    """Whether an entity starts at this tag."""
    if prefix in ("B", "S"):
        return True
    if prefix in ("I", "E") and previous_prefix in ("O", "E", "S"):
        return True
    return prefix != "O" and previous_type != entity_type


def extract_entities(sentences):
    """Entities of tagged sentences, as conlleval reads them.

    A tag is cut at its first '-' into a prefix and a type. An entity starts
    at B- (and S-), at an I- (or E-) that follows O, or where the type
    changes; it ends before O, B- or S-, after E- or S-, or where the type
    changes. So IOB1 and IOB2 (and BIOES) are all read right, and ill-formed
    sequences (I-PER after O) the way conlleval reads them. Sentences are
    separate: no entity crosses a sentence boundary.

    Args:
      sentences: list of lists of tags.

    Returns:
      Set of (type, sentence index, first word, last word).
    """
    entities = set()
    for index, tags in enumerate(sentences):
        previous_prefix, previous_type = "O", ""
        start = None
        for position, tag in enumerate(list(tags) + ["O"]):
            prefix, entity_type = split_tag(tag)
            if start is not None and _chunk_ends(previous_prefix, previous_type, prefix,
                                                 entity_type):
                entities.add((previous_type, index, start, position - 1))
                start = None
            if _chunk_starts(previous_prefix, previous_type, prefix, entity_type):
                start = position
            previous_prefix, previous_type = prefix, entity_type
    return entities


def _prf(correct, found_predicted, found_gold):
    precision = correct / found_predicted if found_predicted else 0.0
    recall = correct / found_gold if found_gold else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def evaluate_tags(gold_sentences, predicted_sentences):
    """conlleval's scores of predicted tags against gold tags.

    Args:
      gold_sentences, predicted_sentences: lists of lists of tags, aligned
        (sentence by sentence, word by word).

    Returns:
      dict: "precision", "recall", "f1" (entities whose type, first and last
      word all match, as fractions), "accuracy" (words whose tag is right),
      "num_gold_entities", "num_predicted_entities", "num_correct_entities",
      and per type T found in either: "precision_T", "recall_T", "f1_T".
    """
    if len(gold_sentences) != len(predicted_sentences) or any(
            len(g) != len(p) for g, p in zip(gold_sentences, predicted_sentences)):
        raise ValueError("gold and predicted tags are not aligned")
    gold = extract_entities(gold_sentences)
    predicted = extract_entities(predicted_sentences)
    correct = gold & predicted
    words = sum(len(g) for g in gold_sentences)
    right = sum(g == p for gs, ps in zip(gold_sentences, predicted_sentences)
                for g, p in zip(gs, ps))
    precision, recall, f1 = _prf(len(correct), len(predicted), len(gold))
    result = {"precision": precision, "recall": recall, "f1": f1,
              "accuracy": right / words if words else 0.0,
              "num_gold_entities": len(gold), "num_predicted_entities": len(predicted),
              "num_correct_entities": len(correct)}
    for entity_type in sorted({e[0] for e in gold | predicted}):
        counts = [sum(e[0] == entity_type for e in entities)
                  for entities in (correct, predicted, gold)]
        (result["precision_" + entity_type], result["recall_" + entity_type],
         result["f1_" + entity_type]) = _prf(*counts)
    return result
