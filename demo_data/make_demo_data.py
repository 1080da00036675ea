"""Generates the demo's shipped data from templates (deterministic).

Everything here is synthetic: invented people in invented towns, written from
small sentence templates, so the files are free to ship and small (about
0.5 MB in all). Running this script again rewrites the same files byte for
byte (fixed seeds, no dependence on dict or set order).

    python demo_data/make_demo_data.py            # writes next to this script

Writes:
  corpus.txt         pre-training corpus: one sentence per line, a blank line
                     between documents (create_vocab.py,
                     create_pretraining_data.py).
  sentiment/         a review-sentiment task in the GLUE SST-2 layout
                     (train.tsv, dev.tsv: "sentence<TAB>label" with a header;
                     test.tsv: "index<TAB>sentence"), for
                     run_classifier.py --task_name=SST-2. The label is not a
                     keyword lookup: "not" flips an adjective's polarity and in
                     "X but Y" the clause after "but" decides.
  squad/train.json,  a SQuAD 1.1-format question-answering set about short
  squad/dev.json     biographies (run_squad.py).
  sentences.txt      a few lines for extract_features.py (one with the
                     "A ||| B" pair delimiter).
  ner/               a named-entity set in the CoNLL-2003 layout (train.txt,
                     valid.txt, test.txt: "token POS chunk tag", IOB1 tags,
                     -DOCSTART- between documents) for run_ner.py: persons,
                     places and organisations, where a town's name is a
                     place after "in", part of a person's name after a first
                     name, and part of an organisation before "Rowing Club".
  swag/              a multiple-choice set in the SWAG CSV layout (train.csv,
                     val.csv, test.csv without labels) for run_swag.py: pick
                     the ending that fits a short biography (the person's
                     workplace, the colour of their vehicle, how a dinner
                     went).
"""

import argparse
import csv
import io
import json
import os
import random

NAMES = [  # (name, subject pronoun, possessive)
    ("Ada", "she", "her"), ("Bruno", "he", "his"), ("Clara", "she", "her"),
    ("Dario", "he", "his"), ("Elin", "she", "her"), ("Farid", "he", "his"),
    ("Greta", "she", "her"), ("Hugo", "he", "his"), ("Ines", "she", "her"),
    ("Jonas", "he", "his"), ("Kira", "she", "her"), ("Leon", "he", "his"),
    ("Mara", "she", "her"), ("Nils", "he", "his"), ("Olga", "she", "her"),
    ("Pavel", "he", "his"), ("Rosa", "she", "her"), ("Sami", "he", "his"),
    ("Tilda", "she", "her"), ("Umar", "he", "his"), ("Vera", "she", "her"),
    ("Wim", "he", "his"), ("Yara", "she", "her"), ("Zane", "he", "his"),
    ("Alma", "she", "her"), ("Boris", "he", "his"), ("Cora", "she", "her"),
    ("Emil", "he", "his"), ("Fiona", "she", "her"), ("Gil", "he", "his"),
]
TOWNS = ["Pinecombe", "Larkvale", "Dunmere", "Hollowby", "Brightwater", "Fennick",
         "Marrowgate", "Quillsby", "Ashcombe", "Ternwick", "Oldmoor", "Saltreach"]
JOBS = [  # (job, plural, workplace)
    ("baker", "bakers", "bakery"), ("teacher", "teachers", "school"),
    ("nurse", "nurses", "hospital"), ("farmer", "farmers", "farm"),
    ("carpenter", "carpenters", "workshop"), ("painter", "painters", "studio"),
    ("fisher", "fishers", "harbour"), ("doctor", "doctors", "clinic"),
    ("librarian", "librarians", "library"), ("gardener", "gardeners", "park"),
    ("pilot", "pilots", "airport"), ("tailor", "tailors", "shop"),
    ("cook", "cooks", "kitchen"), ("miller", "millers", "mill"),
    ("potter", "potters", "pottery"), ("driver", "drivers", "depot"),
]
LANDMARKS = ["river", "lake", "hills", "forest", "sea", "old bridge", "mountains",
             "marsh", "valley", "castle"]
COLORS = ["red", "blue", "green", "yellow", "black", "white", "orange", "purple",
          "grey", "brown"]
VEHICLES = ["bicycle", "boat", "car", "van", "scooter", "cart"]
FOODS = ["soup", "bread", "pie", "pasta", "rice", "stew", "salad", "fish", "cheese",
         "cake", "pancakes", "noodles", "beans", "apples", "dumplings"]
ANIMALS = [("dog", "barks"), ("cat", "sleeps"), ("goat", "eats grass"),
           ("parrot", "talks"), ("horse", "runs"), ("rabbit", "hops"),
           ("duck", "swims"), ("hen", "lays eggs")]
PET_NAMES = ["Pip", "Moss", "Button", "Ziggy", "Pepper", "Biscuit", "Nutmeg", "Sprout",
             "Tansy", "Clover"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
HOBBIES = ["read old books", "play the violin", "paint pictures", "go fishing",
           "walk in the hills", "grow tomatoes", "play chess", "sing in the choir",
           "bake bread", "swim in the lake", "watch the stars", "write letters"]
RELATIVES = ["sister", "brother", "cousin", "aunt", "uncle", "friend", "grandmother",
             "grandfather"]
TRANSPORT = ["train", "bus", "boat", "bicycle", "car"]
BUILDINGS = ["library", "market", "school", "bakery", "clinic", "harbour", "mill",
             "park", "theatre", "museum", "station", "church"]
FESTIVALS = ["music festival", "harvest fair", "boat race", "lantern parade",
             "cheese market", "kite festival"]
SEASONS = ["spring", "summer", "autumn", "winter"]
TREES = ["oak", "birch", "apple", "willow", "chestnut", "pine"]
PLACES = ["the corner cafe", "the harbour inn", "the old mill restaurant",
          "the station cafe", "the green kitchen", "the market diner",
          "the lakeside inn", "the blue door cafe"]
ASPECTS = ["soup", "bread", "pie", "coffee", "tea", "salad", "fish", "cake", "pasta",
           "stew", "service", "music", "room", "view", "waiter", "dessert", "menu",
           "table", "garden", "price"]
POSITIVE = ["good", "great", "lovely", "pleasant", "excellent", "wonderful", "nice",
            "perfect", "delicious", "charming"]
NEGATIVE = ["bad", "awful", "poor", "terrible", "dull", "horrible", "unpleasant",
            "disappointing", "bland", "dreadful"]
INTENSIFIERS = ["", "", "very ", "really ", "quite ", "rather "]


# ---------------------------------------------------------------------------
# Pre-training corpus.

def person_document(rng):
    """Sentences about one person: a short biography."""
    name, he, his = rng.choice(NAMES)
    He, His = he.capitalize(), his.capitalize()
    job, _, workplace = rng.choice(JOBS)
    town = rng.choice(TOWNS)
    other, _, _ = rng.choice(NAMES)
    pet, sound = rng.choice(ANIMALS)
    color, vehicle = rng.choice(COLORS), rng.choice(VEHICLES)
    sentences = [
        "%s is a %s who lives in %s." % (name, job, town),
        "Every morning %s walks to the %s where %s works." % (he, workplace, he),
        "%s was born in %d and grew up near the %s." % (
            He, rng.randint(1950, 2005), rng.choice(LANDMARKS)),
        "%s has a %s %s that %s uses on %ss." % (
            name, color, vehicle, he, rng.choice(DAYS)),
        "What colour is %s's %s? It is %s." % (name, vehicle, color),
        "%s favourite food is %s, which %s cooks every %s." % (
            His, rng.choice(FOODS), he, rng.choice(DAYS)),
        "%s keeps a %s called %s, and the %s %s all day." % (
            name, pet, rng.choice(PET_NAMES), pet, sound),
        "On %ss, %s visits %s %s %s in %s." % (
            rng.choice(DAYS), name, his, rng.choice(RELATIVES), other, rng.choice(TOWNS)),
        "In the evening, %s likes to %s." % (he, rng.choice(HOBBIES)),
        "Last year %s travelled to %s by %s." % (
            name, rng.choice(TOWNS), rng.choice(TRANSPORT)),
        "People in %s say %s is the best %s in town." % (town, name, job),
        "What does %s do for a living? %s is a %s." % (name, He, job),
        "Which town is %s from? %s comes from %s." % (name, He, town),
        "When was %s born? Nobody in %s knows the year." % (name, town),
    ]
    first, rest = sentences[0], sentences[1:]
    rng.shuffle(rest)
    return [first] + rest[:rng.randint(4, 9)]


def town_document(rng):
    """Sentences about one town."""
    town = rng.choice(TOWNS)
    buildings = rng.sample(BUILDINGS, 3)
    _, jobs, _ = rng.choice(JOBS)
    sentences = [
        "%s is a %s town by the %s." % (town, rng.choice(["small", "quiet", "busy", "old"]),
                                        rng.choice(LANDMARKS)),
        "About %d people live there." % (rng.randint(2, 90) * 100),
        "The town has a %s, a %s and a small %s." % tuple(buildings),
        "Every %s, people in %s hold a %s." % (rng.choice(SEASONS), town,
                                               rng.choice(FESTIVALS)),
        "The main street is lined with %s trees." % rng.choice(TREES),
        "Many people in %s work as %s." % (town, jobs),
        "A %s leaves for %s every hour." % (rng.choice(["train", "bus", "boat"]),
                                            rng.choice(TOWNS)),
        "In %s the %s is %s and the air is %s." % (
            rng.choice(SEASONS), rng.choice(LANDMARKS), rng.choice(["calm", "cold", "bright"]),
            rng.choice(["fresh", "warm", "still"])),
    ]
    first, rest = sentences[0], sentences[1:]
    rng.shuffle(rest)
    return [first] + rest[:rng.randint(3, 6)]


def review_document(rng):
    """A restaurant visit whose sentences agree in sentiment, so that
    pre-training sees how "not", "but" and the adjectives go together."""
    name, he, _ = rng.choice(NAMES)
    place = rng.choice(PLACES)
    happy = rng.random() < 0.5
    sentences = ["Last %s, %s had dinner at %s." % (rng.choice(DAYS), name, place)]
    for _ in range(rng.randint(2, 4)):
        sentences.append(review_sentence(rng, happy)[0].capitalize() + ".")
    if happy:
        sentences.append("%s was happy and %s will come back soon." % (name, he))
    else:
        sentences.append("%s was unhappy and %s will not go back." % (name, he))
    return sentences


def make_corpus(rng, num_documents):
    documents = []
    for _ in range(num_documents):
        kind = rng.random()
        if kind < 0.5:
            documents.append(person_document(rng))
        elif kind < 0.75:
            documents.append(town_document(rng))
        else:
            documents.append(review_document(rng))
    return "\n\n".join("\n".join(d) for d in documents) + "\n"


# ---------------------------------------------------------------------------
# Sentiment task (SST-2 layout).

def _clause(rng, positive, negated):
    """'the soup was (not) very good': positive says what the clause means."""
    aspect = rng.choice(ASPECTS)
    # A negated adjective means the opposite.
    adjective_positive = positive != negated
    adjective = rng.choice(POSITIVE if adjective_positive else NEGATIVE)
    verb = "were" if aspect.endswith("s") else "was"
    return "the %s %s %s%s%s" % (aspect, verb, "not " if negated else "",
                                 rng.choice(INTENSIFIERS), adjective)


def review_sentence(rng, positive):
    """One review sentence with the given overall sentiment.

    Returns (text, form): forms are "plain" (the adjective decides),
    "negated" ("not" flips it) and "contrast" ("X but Y": Y decides).
    """
    form = rng.choices(["plain", "negated", "contrast"], weights=[6, 2, 2])[0]
    if form == "plain":
        text = _clause(rng, positive, negated=False)
    elif form == "negated":
        text = _clause(rng, positive, negated=True)
    else:
        first = _clause(rng, not positive, negated=rng.random() < 0.3)
        second = _clause(rng, positive, negated=rng.random() < 0.3)
        text = "%s but %s" % (first, second)
    if rng.random() < 0.3:
        text = "at %s %s" % (rng.choice(PLACES), text)
    return text, form


def make_sentiment(rng, num_examples, positive_share):
    rows = []
    for _ in range(num_examples):
        positive = rng.random() < positive_share
        text, _ = review_sentence(rng, positive)
        rows.append((text, "1" if positive else "0"))
    return rows


# ---------------------------------------------------------------------------
# SQuAD-format question answering.

def squad_paragraph(rng, paragraph_id):
    """A paragraph about two people and questions about them, with answer
    offsets recorded while the text is assembled."""
    people = rng.sample(NAMES, 2)
    context = ""
    facts = []  # (question, answer text, answer_start)

    def add(text, *answers):
        # text holds {} placeholders filled by answers; records their offsets.
        nonlocal context
        parts = text.split("{}")
        starts = []
        for part, answer in zip(parts, answers):
            context += part
            starts.append(len(context))
            context += answer
        context += parts[-1]
        return starts

    for name, he, his in people:
        job, _, _ = rng.choice(JOBS)
        town = rng.choice(TOWNS)
        year = str(rng.randint(1940, 2005))
        food = rng.choice(FOODS)
        color = rng.choice(COLORS)
        vehicle = rng.choice(VEHICLES)
        s_job, s_town = add("%s is a {} from {}. " % name, job, town)
        (s_year,) = add("%s was born in {}. " % he.capitalize(), year)
        (s_food,) = add("%s favourite food is {}. " % his.capitalize(), food)
        (s_color,) = add("%s owns a {} %s. " % (name, vehicle), color)
        facts += [
            (rng.choice(["What is %s's job?", "What does %s do for a living?"]) % name,
             job, s_job),
            (rng.choice(["Where is %s from?", "Which town is %s from?"]) % name,
             town, s_town),
            (rng.choice(["When was %s born?", "In what year was %s born?"]) % name,
             year, s_year),
            ("What is %s's favourite food?" % name, food, s_food),
            ("What colour is %s's %s?" % (name, vehicle), color, s_color),
        ]
    context = context.strip()
    qas = []
    for i, (question, answer, start) in enumerate(facts):
        assert context[start:start + len(answer)] == answer
        qas.append({"id": "demo-%d-%d" % (paragraph_id, i), "question": question,
                    "answers": [{"text": answer, "answer_start": start}]})
    return {"context": context, "qas": qas}


def make_squad(rng, num_paragraphs, first_id):
    paragraphs = [squad_paragraph(rng, first_id + i) for i in range(num_paragraphs)]
    return {"version": "1.1",
            "data": [{"title": "Demo_biographies", "paragraphs": paragraphs}]}


SENTENCES = [
    "Mara is a baker who lives in Pinecombe.",
    "Every morning she walks to the bakery where she works.",
    "The soup was not very good but the bread was lovely.",
    "Where is Mara from? ||| Mara is a baker from Pinecombe.",
]


# ---------------------------------------------------------------------------
# Named entities (CoNLL-2003 layout).

SURNAMES = ["Lind", "Varga", "Okafor", "Brandt", "Moreau", "Sato", "Novak", "Quist",
            "Haldane", "Ferreira"]
ORG_KINDS = [["Rowing", "Club"], ["Bakers", "Guild"], ["Chess", "Society"],
             ["Town", "Council"], ["Choir"], ["Library", "Trust"]]
VERBS_TRAVEL = ["travelled", "walked", "drove", "cycled"]


def _person(rng):
    """(words, type per word): a first name and, often, a surname, which is
    sometimes a town's name (then only the context says it is a person)."""
    first, _, _ = rng.choice(NAMES)
    roll = rng.random()
    if roll < 0.35:
        return [first], ["PER"]
    surname = rng.choice(TOWNS) if roll < 0.65 else rng.choice(SURNAMES)
    return [first, surname], ["PER", "PER"]


def _organisation(rng):
    words = [rng.choice(TOWNS)] + rng.choice(ORG_KINDS)
    return words, ["ORG"] * len(words)


def _ner_sentence(rng):
    """One sentence as (words, entity type or None per word)."""
    form = rng.randrange(7)
    parts = []  # (words, types)

    def plain(text):
        words = text.split()
        parts.append((words, [None] * len(words)))

    if form == 0:
        parts.append(_person(rng))
        plain("lives in")
        parts.append(([rng.choice(TOWNS)], ["LOC"]))
        plain(".")
    elif form == 1:
        parts.append(_person(rng))
        plain("works for the")
        parts.append(_organisation(rng))
        plain("in")
        parts.append(([rng.choice(TOWNS)], ["LOC"]))
        plain(".")
    elif form == 2:
        plain("The")
        parts.append(_organisation(rng))
        plain("met in")
        parts.append(([rng.choice(TOWNS)], ["LOC"]))
        plain("on %s ." % rng.choice(DAYS))
    elif form == 3:
        parts.append(_person(rng))
        plain("%s from" % rng.choice(VERBS_TRAVEL))
        parts.append(([rng.choice(TOWNS)], ["LOC"]))
        plain("to")
        parts.append(([rng.choice(TOWNS)], ["LOC"]))
        plain("by %s ." % rng.choice(TRANSPORT))
    elif form == 4:
        parts.append(_person(rng))
        plain("and")
        parts.append(_person(rng))
        plain("joined the")
        parts.append(_organisation(rng))
        plain("last %s ." % rng.choice(SEASONS))
    elif form == 5:
        plain("In")
        parts.append(([rng.choice(TOWNS)], ["LOC"]))
        plain(", the %s is %s ." % (rng.choice(LANDMARKS), rng.choice(["calm", "cold",
                                                                       "bright"])))
    else:
        parts.append(_person(rng))
        plain("said the")
        parts.append(_organisation(rng))
        plain("needs more %s ." % rng.choice(["members", "money", "room", "time"]))
    words = [w for ws, _ in parts for w in ws]
    types = [t for _, ts in parts for t in ts]
    return words, types


def iob1_tags(types):
    """Entity types per word (None outside entities; each entity a run of
    one type) -> IOB1 tags, as in the original CoNLL-2003 files: I- inside
    entities, B- only for an entity right after one of the same type. The
    sentence generator puts words between entities, so there are no B-."""
    return ["O" if t is None else "I-" + t for t in types]


def _pos(word, entity_type):
    if entity_type is not None:
        return "NNP", "I-NP"
    if word in (".", ","):
        return word, "O"
    return ("NNP" if word[0].isupper() else "NN"), "I-NP"


def make_ner(rng, num_documents):
    """CoNLL-2003-layout text: -DOCSTART- lines, 'token POS chunk tag'."""
    lines = []
    for _ in range(num_documents):
        lines.append("-DOCSTART- -X- -X- O\n\n")
        for _ in range(rng.randint(3, 5)):
            words, types = _ner_sentence(rng)
            for word, entity_type, tag in zip(words, types, iob1_tags(types)):
                pos, chunk = _pos(word, entity_type)
                lines.append("%s %s %s %s\n" % (word, pos, chunk, tag))
            lines.append("\n")
    return "".join(lines)


# ---------------------------------------------------------------------------
# Multiple choice (SWAG CSV layout).

SWAG_HEADER = ("", "video-id", "fold-ind", "startphrase", "sent1", "sent2", "gold-source",
               "ending0", "ending1", "ending2", "ending3", "label")


def _swag_question(rng):
    """(context, start of the endings, right ending, three wrong endings)."""
    name, he, his = rng.choice(NAMES)
    kind = rng.randrange(3)
    if kind == 0:
        jobs = rng.sample(JOBS, 4)
        job, _, workplace = jobs[0]
        context = "%s is a %s who lives in %s." % (name, job, rng.choice(TOWNS))
        start = "Every morning %s walks to the" % he
        return (context, start, "%s where %s works." % (workplace, he),
                ["%s where %s works." % (j[2], he) for j in jobs[1:]])
    if kind == 1:
        colors = rng.sample(COLORS, 4)
        vehicle = rng.choice(VEHICLES)
        context = "%s has a %s %s that %s uses on %ss." % (name, colors[0], vehicle, he,
                                                          rng.choice(DAYS))
        start = "What colour is %s's %s? It is" % (name, vehicle)
        return context, start, colors[0] + ".", [c + "." for c in colors[1:]]
    happy = rng.random() < 0.5
    clause = review_sentence(rng, happy)[0]
    context = "%s had dinner at %s, and %s." % (name, rng.choice(PLACES), clause)
    start = name
    right = ("was happy and %s will come back soon." % he if happy
             else "was unhappy and %s will not go back." % he)
    wrong = ("was unhappy and %s will not go back." % he if happy
             else "was happy and %s will come back soon." % he)
    others = ["keeps a %s called %s." % (rng.choice(ANIMALS)[0], rng.choice(PET_NAMES)),
              "is a %s in %s." % (rng.choice(JOBS)[0], rng.choice(TOWNS))]
    return context, start, right, [wrong] + others


def make_swag(rng, num_examples, first_id, with_labels=True):
    """SWAG CSV text: the release's header, one row per question; the right
    ending's place is random (about a quarter in each)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(SWAG_HEADER if with_labels else SWAG_HEADER[:-1])
    for i in range(num_examples):
        context, start, right, wrong = _swag_question(rng)
        wrong = list(wrong)
        rng.shuffle(wrong)
        label = rng.randrange(4)
        endings = wrong[:label] + [right] + wrong[label:]
        row = [str(first_id + i), "demo%04d" % (first_id + i), str(i), context + " " + start,
               context, start, "gold"] + endings
        writer.writerow(row + ([str(label)] if with_labels else []))
    return out.getvalue()


def _write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(text)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--output_dir", default=os.path.dirname(os.path.abspath(__file__)))
    args = parser.parse_args()
    out = args.output_dir

    _write(os.path.join(out, "corpus.txt"), make_corpus(random.Random(1), 600))

    rng = random.Random(2)
    # Slightly more positive than negative, so the majority-class baseline
    # is a little above 50%.
    train = make_sentiment(rng, 2000, positive_share=0.55)
    dev = make_sentiment(rng, 400, positive_share=0.55)
    test = make_sentiment(rng, 100, positive_share=0.55)
    _write(os.path.join(out, "sentiment", "train.tsv"),
           "sentence\tlabel\n" + "".join("%s\t%s\n" % row for row in train))
    _write(os.path.join(out, "sentiment", "dev.tsv"),
           "sentence\tlabel\n" + "".join("%s\t%s\n" % row for row in dev))
    _write(os.path.join(out, "sentiment", "test.tsv"),
           "index\tsentence\n" + "".join("%d\t%s\n" % (i, row[0])
                                         for i, row in enumerate(test)))

    rng = random.Random(3)
    _write(os.path.join(out, "squad", "train.json"),
           json.dumps(make_squad(rng, 120, first_id=0)) + "\n")
    _write(os.path.join(out, "squad", "dev.json"),
           json.dumps(make_squad(rng, 30, first_id=1000)) + "\n")

    _write(os.path.join(out, "sentences.txt"), "\n".join(SENTENCES) + "\n")

    rng = random.Random(4)
    _write(os.path.join(out, "ner", "train.txt"), make_ner(rng, 150))
    _write(os.path.join(out, "ner", "valid.txt"), make_ner(rng, 40))
    _write(os.path.join(out, "ner", "test.txt"), make_ner(rng, 20))

    rng = random.Random(5)
    _write(os.path.join(out, "swag", "train.csv"), make_swag(rng, 500, 0))
    _write(os.path.join(out, "swag", "val.csv"), make_swag(rng, 120, 10000))
    _write(os.path.join(out, "swag", "test.csv"), make_swag(rng, 40, 20000,
                                                            with_labels=False))


if __name__ == "__main__":
    main()
