# coding=utf-8
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
"""

import argparse
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


if __name__ == "__main__":
    main()
