"""Offline synthetic datasets, one per task family, generated from a seed (used by `--profile smoke` and the tests).

Design choice: every set splits its content words into two disjoint halves. Train and validation rows use the first
half, test rows only the second. A model can therefore not pass the test by memorising words during fine-tuning: it
has to bring knowledge from pretraining ("superb" is positive, "tokyo" is a place, "mango" is a fruit). A random-weight
model scores near chance on test, a pretrained encoder clearly above it (both are asserted in the tests). Templates
never reveal the answer: an entity slot may hold a person, a place, an organisation or a plain noun phrase, and QA
contexts state every fact with the same verbs in a shuffled order.

Rows have the canonical shapes the task families read (see `loaders`): SC `{id, text, text_pair, label}`, TC
`{id, tokens, tags}`, QA `{id, question, context, answers: {text, answer_start}}`, IR `{id, query, docs: [{id,
text, grade}]}`.
"""

from __future__ import annotations

import random

# ------------------------------------------------------------------------------------------------------- word lists

POSITIVE = [
    "good", "great", "excellent", "wonderful", "fantastic", "brilliant", "lovely", "enjoyable", "perfect",
    "beautiful", "charming", "impressive", "amazing", "superb", "delightful", "pleasant", "outstanding", "terrific",
    "marvelous", "splendid", "awesome", "fabulous", "remarkable", "magnificent",
]  # fmt: skip
NEGATIVE = [
    "bad", "terrible", "awful", "horrible", "boring", "dull", "poor", "dreadful", "disappointing", "annoying",
    "mediocre", "ugly", "painful", "miserable", "pathetic", "stupid", "lousy", "tedious", "unpleasant", "disgusting",
    "atrocious", "lame", "worthless", "pointless",
]  # fmt: skip
_REVIEW_SUBJECTS = ["movie", "film", "plot", "acting", "story", "soundtrack", "ending", "cast", "script", "show",
                    "performance", "dialogue", "book", "meal", "concert", "game"]
_INTENSIFIERS = ["", "", "really", "very", "quite", "truly", "rather", "pretty", "so", "just"]
_REVIEW_TEMPLATES = [
    "the {s} was {i} {a}", "i thought the {s} was {i} {a}", "honestly , the {s} felt {i} {a}",
    "my friends said the {s} was {i} {a}", "we watched it on sunday and the {s} was {i} {a}",
    "overall the {s} seemed {i} {a} to me", "after an hour i found the {s} {i} {a}",
    "it was a {i} {a} {s}", "what a {i} {a} {s} that was",
]

PERSONS = [
    "john smith", "mary johnson", "james brown", "linda davis", "robert miller", "susan wilson", "michael moore",
    "karen lopez", "david anderson", "nancy thomas", "william jackson", "lisa white", "richard harris", "emma clark",
    "george lewis", "anna walker", "peter hall", "sarah young", "paul king", "laura wright",
    "barack obama", "angela merkel", "elvis presley", "albert einstein", "pablo picasso", "taylor swift",
    "vladimir putin", "oprah winfrey", "charles darwin", "isaac newton", "mozart", "shakespeare",
]  # fmt: skip
PLACES = [
    "paris", "london", "tokyo", "berlin", "madrid", "rome", "moscow", "beijing", "cairo", "sydney", "toronto",
    "chicago", "boston", "france", "germany", "japan", "canada", "brazil", "india", "china", "italy", "spain",
    "mexico", "egypt", "kenya", "peru", "norway", "sweden", "new york", "los angeles", "south africa", "hong kong",
]  # fmt: skip
ORGANISATIONS = [
    "google", "microsoft", "amazon", "toyota", "nike", "intel", "samsung", "sony", "ibm", "nasa", "unicef",
    "the united nations", "general motors", "coca cola", "walmart", "netflix", "boeing", "adidas", "ford motor company",
    "honda", "pepsi", "facebook", "oracle", "nintendo", "the red cross", "harvard university", "the world bank",
    "bank of america", "ikea", "volkswagen", "mcdonalds", "starbucks",
]  # fmt: skip
PLAIN_PHRASES = [
    "the weather", "my dog", "the garden", "some coffee", "a new car", "the kitchen", "his homework", "the river",
    "the old bridge", "our dinner", "a long walk", "the broken window", "her bicycle", "the price of bread",
    "a green apple", "the noise", "the meeting", "my shoes", "the last train", "a cold winter", "the blue door",
    "their vacation", "the rent", "a good book", "the traffic", "the little boat", "my phone", "the soup",
    "the exam", "a small cake", "the mountains", "the office",
]  # fmt: skip
_ENTITY_TEMPLATES = [
    "yesterday we talked about {0} for hours", "i read an article about {0} this morning",
    "{0} was mentioned in the news again", "she keeps thinking about {0}", "everyone was discussing {0} and {1}",
    "the report on {0} was very long", "nobody expected {0} to come up at lunch", "we wrote a letter about {0}",
    "they compared {0} with {1} last week", "there is a new documentary about {0}", "he never stops talking about {0}",
    "the podcast covered {0} , {1} and more",
]
TAG_NAMES = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]

CATEGORIES = {
    "animal": ["dog", "cat", "horse", "rabbit", "tiger", "lion", "eagle", "parrot", "snake", "wolf", "bear", "fox",
               "elephant", "giraffe", "zebra", "monkey", "dolphin", "shark", "owl", "turtle"],
    "vehicle": ["car", "truck", "bicycle", "motorcycle", "bus", "boat", "airplane", "train", "scooter", "tractor",
                "helicopter", "van", "ship", "taxi", "canoe", "jeep", "tram", "yacht", "limousine", "submarine"],
    "fruit": ["apple", "banana", "orange", "mango", "grape", "cherry", "peach", "pear", "lemon", "melon",
              "plum", "kiwi", "pineapple", "strawberry", "apricot", "coconut", "papaya", "lime", "fig", "watermelon"],
    "instrument": ["piano", "guitar", "violin", "drum", "flute", "trumpet", "harp", "cello", "saxophone", "clarinet",
                   "banjo", "trombone", "accordion", "ukulele", "organ", "tuba", "harmonica", "oboe", "mandolin",
                   "xylophone"],
    "color": ["red", "blue", "green", "yellow", "purple", "black", "white", "pink", "brown", "gray",
              "indigo", "violet", "silver", "gold", "turquoise", "beige", "maroon", "navy", "crimson", "lavender"],
}
_OWNERS = ["tom", "ana", "the teacher", "my uncle", "the girl", "our neighbour", "the old man", "sam"]
_FACT_TEMPLATES = {
    "color": "{o} painted the fence {x} .",
    "default": "{o} has a {x} .",
}
_QUESTIONS = {
    "animal": ["which animal does {o} have ?", "what animal is mentioned ?", "name the animal ."],
    "vehicle": ["which vehicle does {o} have ?", "what vehicle is mentioned ?", "name the vehicle ."],
    "fruit": ["which fruit does {o} have ?", "what fruit is mentioned ?", "name the fruit ."],
    "instrument": ["which instrument does {o} have ?", "what instrument is mentioned ?", "name the instrument ."],
    "color": ["which color did {o} use ?", "what color is mentioned ?", "name the color ."],
}

# Two-level topics for retrieval: a passage on the query's topic is relevant (grade 2), one on a sibling topic of the
# same domain partly relevant (grade 1), anything else not relevant (grade 0).
TOPICS = {
    "food": {
        "fruit": CATEGORIES["fruit"],
        "vegetables": ["carrot", "potato", "onion", "cabbage", "spinach", "broccoli", "lettuce", "cucumber", "garlic",
                       "celery", "pumpkin", "radish", "beans", "peas", "corn", "zucchini", "asparagus", "kale",
                       "turnip", "beetroot"],
    },
    "nature": {
        "wild animals": ["lion", "tiger", "wolf", "bear", "elephant", "giraffe", "zebra", "leopard", "gorilla", "fox",
                         "rhino", "hippo", "cheetah", "jaguar", "moose", "deer", "kangaroo", "panther", "buffalo",
                         "hyena"],
        "weather": ["rain", "snow", "storm", "thunder", "wind", "fog", "hail", "lightning", "drizzle", "blizzard",
                    "hurricane", "tornado", "frost", "sunshine", "clouds", "humidity", "monsoon", "breeze", "heatwave",
                    "flood"],
    },
    "leisure": {
        "sports": ["football", "soccer", "basketball", "tennis", "baseball", "volleyball", "golf", "rugby", "cricket",
                   "hockey", "boxing", "wrestling", "cycling", "skiing", "badminton", "marathon", "swimming",
                   "surfing", "karate", "archery"],
        "music": CATEGORIES["instrument"],
    },
    "work": {
        "medicine": ["doctor", "nurse", "hospital", "surgeon", "medicine", "clinic", "patient", "pharmacy", "dentist",
                     "vaccine", "ambulance", "surgery", "therapy", "disease", "fever", "infection", "prescription",
                     "pills", "injury", "diagnosis"],
        "computers": ["computer", "laptop", "keyboard", "software", "internet", "printer", "monitor", "server",
                      "email", "website", "database", "processor", "password", "browser", "router", "programming",
                      "algorithm", "download", "mouse", "spreadsheet"],
    },
    "everyday": {
        "clothing": ["shirt", "jacket", "dress", "shoes", "hat", "scarf", "gloves", "socks", "coat", "skirt",
                     "trousers", "sweater", "boots", "jeans", "belt", "tie", "pajamas", "sandals", "hoodie", "blouse"],
        "vehicles": CATEGORIES["vehicle"],
    },
}
_DOC_TEMPLATES = [
    "this page is about {0} and {1} for beginners", "a short note on {0} , {1} and similar things",
    "people often ask questions about {0} and {1}", "our guide covers {0} as well as {1}",
    "here you can learn about {0} and {1} today", "facts and stories about {0} and also {1}",
]
_QUERY_TEMPLATES = ["information on {0}", "looking for a guide about {0}", "tell me about {0}", "questions on {0}",
                    "where can i learn about {0}", "{0}"]


def _halves(words: list[str], test: bool) -> list[str]:
    """The first half of a word list is for train/validation, the second half for test (see module docstring)."""
    middle = len(words) // 2
    return words[middle:] if test else words[:middle]


# ------------------------------------------------------------------------------------------------------ generators


def sentiment(n: int, *, seed: int, test: bool) -> list[dict]:
    """Movie-review style sentences labelled 1 (positive) or 0 (negative) by their one sentiment adjective."""
    rng = random.Random(f"sentiment-{seed}-{test}")
    positive, negative = _halves(POSITIVE, test), _halves(NEGATIVE, test)
    rows = []
    for index in range(n):
        label = index % 2
        adjective = rng.choice(positive if label else negative)
        template = rng.choice(_REVIEW_TEMPLATES)
        text = template.format(s=rng.choice(_REVIEW_SUBJECTS), i=rng.choice(_INTENSIFIERS), a=adjective)
        rows.append({"id": f"sent-{int(test)}-{index}", "text": " ".join(text.split()), "text_pair": None,
                     "label": label})
    rng.shuffle(rows)
    return rows


def _slot_filler(rng: random.Random, test: bool) -> tuple[list[str], str]:
    """One slot: a person, a place, an organisation or a plain phrase, each with probability 1/4."""
    kind = rng.choice(["PER", "LOC", "ORG", "O"])
    pool = {"PER": PERSONS, "LOC": PLACES, "ORG": ORGANISATIONS, "O": PLAIN_PHRASES}[kind]
    return rng.choice(_halves(pool, test)).split(), kind


def entities(n: int, *, seed: int, test: bool) -> list[dict]:
    """Sentences whose slots hold entities; word-level BIO tags with `TAG_NAMES` ids."""
    rng = random.Random(f"entities-{seed}-{test}")
    rows = []
    for index in range(n):
        template = rng.choice(_ENTITY_TEMPLATES)
        tokens, tags = [], []
        for piece in template.split():
            if piece.startswith("{") and piece.endswith("}"):
                words, kind = _slot_filler(rng, test)
                tokens += words
                tags += [0] * len(words) if kind == "O" else [
                    TAG_NAMES.index(("B-" if k == 0 else "I-") + kind) for k in range(len(words))
                ]
            else:
                tokens.append(piece)
                tags.append(0)
        rows.append({"id": f"ent-{int(test)}-{index}", "tokens": tokens, "tags": tags})
    return rows


def _fact(category: str, owner: str, item: str) -> str:
    return _FACT_TEMPLATES.get(category, _FACT_TEMPLATES["default"]).format(o=owner, x=item)


def question_answering(n: int, *, seed: int, test: bool, unanswerable: float = 0.0) -> list[dict]:
    """Contexts listing one item per category (in shuffled order); the question asks for one category.

    With `unanswerable > 0` (the SQuAD v2 variant), that fraction of questions asks for a category absent from the
    context, and their answer list is empty.
    """
    rng = random.Random(f"qa-{seed}-{test}-{unanswerable}")
    rows = []
    for index in range(n):
        owner = rng.choice(_OWNERS)
        present = rng.sample(sorted(CATEGORIES), 3 if unanswerable else 4)
        items = {c: rng.choice(_halves(CATEGORIES[c], test)) for c in present}
        facts = [_fact(c, owner, items[c]) for c in present]
        rng.shuffle(facts)
        context = " ".join(facts)
        absent = [c for c in CATEGORIES if c not in present]
        asks_absent = unanswerable > 0 and rng.random() < unanswerable
        asked = rng.choice(absent) if asks_absent else rng.choice(present)
        question = rng.choice(_QUESTIONS[asked]).format(o=owner)
        answers = {"text": [], "answer_start": []}
        if not asks_absent:
            fact = _fact(asked, owner, items[asked])
            start = context.index(fact) + fact.index(items[asked], len(owner))
            answers = {"text": [items[asked]], "answer_start": [start]}
        rows.append({"id": f"qa-{int(test)}-{index}", "question": question, "context": context, "answers": answers})
    return rows


def retrieval(n: int, *, seed: int, test: bool, docs_per_topic: int = 20) -> list[dict]:
    """Queries naming one topic word, over a shared corpus of passages that each name two other words of a topic.

    Grades are global and consistent, so the union corpus of labelled documents holds no unlabelled relevant
    passage: every passage is graded for every query, 2 on the query's topic, 1 on the sibling topic of the same
    domain, 0 otherwise. Query words and passage words are disjoint, so lexical overlap finds nothing. The first
    document of each query is its own training positive (a different one per query)."""
    rng = random.Random(f"ir-{seed}-{test}")
    corpus = []  # (doc id, text, domain, topic)
    for domain, children in TOPICS.items():
        for topic, words in children.items():
            passage_words = _halves(words, test)[3:]  # the first three words of each half only appear in queries
            for k in range(docs_per_topic):
                first, second = rng.sample(passage_words, 2)
                text = rng.choice(_DOC_TEMPLATES).format(first, second)
                corpus.append((f"d{int(test)}-{topic.replace(' ', '_')}-{k}", text, domain, topic))
    topics = [(domain, topic) for domain, children in TOPICS.items() for topic in children]
    rows = []
    for index in range(n):
        domain, topic = rng.choice(topics)
        query = rng.choice(_QUERY_TEMPLATES).format(rng.choice(_halves(TOPICS[domain][topic], test)[:3]))
        docs = [{"id": doc_id, "text": text, "grade": 2 if (d, t) == (domain, topic) else int(d == domain)}
                for doc_id, text, d, t in corpus]
        positive = rng.choice([doc for doc in docs if doc["grade"] == 2])
        docs.remove(positive)
        rows.append({"id": f"q{int(test)}-{index}", "query": query, "docs": [positive, *docs]})
    return rows
