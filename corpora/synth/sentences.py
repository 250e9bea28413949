"""Sentence plans for the French corpus, realised in French and English with pyrealb.

A plan is plain data (which subject, verb, object, place, time, polarity); ``realise_pair``
turns it into a French sentence (pyrealb does the conjugation, elision and agreement) and
its English translation. Plans are sampled from ``lexicon`` with a seeded generator, so the
same seed always yields the same sentences in the same order.

Why the variety: a tiny ST model trained on a few templates learns to swap slot words rather
than translate (measured while the corpus was designed). Five templates, pronoun or noun subjects, five kinds
of determiner, numbers, optional adjectives, three tenses driven by a time phrase (fronted or
not), negation and questions give thousands of distinct sentences over a few hundred words.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, replace

import pyrealb as rb

from corpora.synth import lexicon as lx

# tense name -> (French pyrealb tense, English pyrealb tense). Past = passé composé / preterite.
TENSES = {"present": ("p", "p"), "past": ("pc", "ps"), "future": ("f", "f")}
MAX_WORDS = 9  # ~1-3 s of speech at espeak-ng's default rate


def use_lang(lang: str) -> None:
    """pyrealb looks words up in the lexicon of the language loaded when a constituent is built."""
    rb.loadFr() if lang == "fr" else rb.loadEn()


def finish(text: str, source: object = None) -> str:
    """Strip pyrealb's trailing space; refuse realisations with unknown words (``[[word]]``)."""
    text = " ".join(text.split())
    if "[[" in text:
        raise ValueError(f"pyrealb could not realise a word in {text!r} (plan {source!r})")
    return text


@dataclass(frozen=True)
class NounPhrase:
    noun: lx.Noun | None = None      # None: a personal pronoun
    det: str = "def"                 # def / indef / poss1 / poss2 / dem / num
    plural: bool = False
    count: int = 0                   # for det == "num"
    adj: lx.Adj | None = None
    person: int = 3                  # pronouns only
    gender: str = "m"                # pronouns only (il/elle)


@dataclass(frozen=True)
class Plan:
    template: str                    # trans / intrans / be_adj / trans_place
    subject: NounPhrase
    verb: lx.Verb | None = None
    obj: NounPhrase | None = None
    adj: lx.Adj | None = None
    place: lx.Place | None = None
    time: lx.TimePhrase | None = None
    time_front: bool = False
    negative: bool = False
    question: bool = False

    @property
    def tense(self) -> str:
        return self.time.tense if self.time else "present"

    def pyrealb_tense(self, lang: str) -> str:
        fr, en = TENSES[self.tense]
        if lang == "fr" and self.template == "be_adj" and self.tense == "past":
            return "i"  # "était fatigué", not "a été fatigué"
        return fr if lang == "fr" else en


_FR_DET = {"def": "le", "indef": "un", "dem": "ce"}
_EN_DET = {"def": "the", "indef": "a", "dem": "this"}


def _np(lang: str, np: NounPhrase):
    if np.noun is None:
        word = "je" if lang == "fr" else "I"
        pro = rb.Pro(word).pe(np.person).n("p" if np.plural else "s")
        return pro.g(np.gender)
    noun = rb.N(np.noun.fr if lang == "fr" else np.noun.en)
    parts = []
    if np.det == "num":
        parts.append(rb.NO(np.count).nat(True))
    elif np.det in ("poss1", "poss2"):
        parts.append(rb.D("mon" if lang == "fr" else "my").pe(1 if np.det == "poss1" else 2))
    else:
        parts.append(rb.D((_FR_DET if lang == "fr" else _EN_DET)[np.det]))
    if np.adj is not None:
        parts.append(rb.A(np.adj.fr if lang == "fr" else np.adj.en))
    parts.append(noun)
    phrase = rb.NP(*parts)
    return phrase.n("p") if np.plural or np.det == "num" else phrase


def _place(lang: str, place: lx.Place):
    if lang == "fr":
        return rb.PP(rb.P(place.fr_prep), rb.NP(rb.D(place.fr_det), rb.N(place.fr_noun)))
    return rb.Q(" ".join(w for w in (place.en_prep, place.en_det, place.en_noun) if w))


def realise(plan: Plan, lang: str) -> str:
    """The plan as one sentence in ``lang`` ("fr" or "en")."""
    use_lang(lang)
    fr = lang == "fr"
    verb = rb.V("être" if fr else "be") if plan.template == "be_adj" else rb.V(plan.verb.fr if fr else plan.verb.en)
    vp_parts = [verb]
    if plan.template == "be_adj":
        vp_parts.append(rb.A(plan.adj.fr) if fr else rb.Q(plan.adj.en))
    if plan.obj is not None:
        vp_parts.append(_np(lang, plan.obj))
    if plan.place is not None:
        vp_parts.append(_place(lang, plan.place))
    s_parts = [_np(lang, plan.subject), rb.VP(*vp_parts)]
    if plan.time is not None:
        time = rb.Q(plan.time.fr if fr else plan.time.en)
        if plan.time_front:
            s_parts.insert(0, time.a(","))
        else:
            s_parts.append(time)
    sentence = rb.S(*s_parts).t(plan.pyrealb_tense(lang))
    if plan.negative:
        sentence = sentence.typ({"neg": True})
    if plan.question:
        sentence = sentence.typ({"int": "yon"})
    return finish(sentence.realize(), plan)


def realise_pair(plan: Plan) -> tuple[str, str]:
    """(French sentence, English translation)."""
    return realise(plan, "fr"), realise(plan, "en")


# ---------------------------------------------------------------- sampling

_TEMPLATES = (("trans", 0.38), ("intrans", 0.22), ("be_adj", 0.22), ("trans_place", 0.18))
_NOUN_BY_FR = {n.fr: n for n in lx.NOUNS}


def _pick(rng: random.Random, items):
    return items[rng.randrange(len(items))]


def _noun_phrase(rng: random.Random, kinds: tuple[str, ...], allow_pronoun: bool,
                 nouns: tuple[lx.Noun, ...] | None = None) -> NounPhrase:
    if allow_pronoun and rng.random() < 0.3:
        person = _pick(rng, (1, 1, 2, 3, 3, 3))
        return NounPhrase(person=person, plural=rng.random() < 0.35, gender=_pick(rng, "mf"))
    pool = nouns or tuple(n for n in lx.NOUNS if n.kind in kinds)
    noun = _pick(rng, pool)
    det = _pick(rng, ("def", "def", "indef", "poss1", "poss2", "dem", "num"))
    count = rng.randint(2, 10) if det == "num" else 0
    plural = det == "num" or (det != "indef" and rng.random() < 0.25)
    adj = None
    if rng.random() < 0.2:
        fitting = tuple(a for a in lx.ADJECTIVES if noun.kind in a.kinds)
        adj = _pick(rng, fitting) if fitting else None
    return NounPhrase(noun=noun, det=det, plural=plural, count=count, adj=adj)


def _subject_kinds(verb: lx.Verb) -> tuple[str, ...]:
    return lx.ANIMATE if verb.fr in lx.ANIMAL_VERBS else ("person",)


def sample_plan(rng: random.Random) -> Plan:
    """One random, sensible plan (subjects fit their verbs, objects fit their verbs)."""
    r, acc, template = rng.random(), 0.0, "trans"
    for name, weight in _TEMPLATES:
        acc += weight
        if r < acc:
            template = name
            break
    time = _pick(rng, lx.TIMES) if rng.random() < 0.6 else None
    front = time is not None and rng.random() < 0.35
    if template == "be_adj":
        subject = _noun_phrase(rng, ("person", "animal", "thing", "food"), allow_pronoun=True)
        kind = subject.noun.kind if subject.noun else "person"
        adj = _pick(rng, tuple(a for a in lx.ADJECTIVES if kind in a.kinds and a != subject.adj))
        plan = Plan("be_adj", subject, adj=adj, time=time, time_front=front)
    elif template == "intrans":
        verb = _pick(rng, tuple(v for v in lx.VERBS if not v.objects))
        subject = _noun_phrase(rng, _subject_kinds(verb), allow_pronoun=True)
        place = _pick(rng, lx.PLACES) if rng.random() < 0.75 else None
        plan = Plan("intrans", subject, verb=verb, place=place, time=time, time_front=front)
    else:
        verb = _pick(rng, tuple(v for v in lx.VERBS if v.objects))
        subject = _noun_phrase(rng, _subject_kinds(verb), allow_pronoun=True)
        limit = lx.OBJECT_LIMITS.get(verb.fr)
        nouns = tuple(_NOUN_BY_FR[n] for n in limit) if limit else None
        obj = _noun_phrase(rng, verb.objects, allow_pronoun=False, nouns=nouns)
        place = _pick(rng, lx.PLACES) if template == "trans_place" else None
        if template == "trans_place":
            time, front = None, False  # keeps the sentence short
        plan = Plan(template, subject, verb=verb, obj=obj, place=place, time=time, time_front=front)
    roll = rng.random()
    # French negation of an indefinite object needs "pas de" (pyrealb writes "pas un"): skip those.
    if roll < 0.1 and not (plan.obj is not None and plan.obj.det == "indef"):
        plan = replace(plan, negative=True)
    elif roll > 0.94 and plan.time is None:
        plan = replace(plan, question=True)
    return plan


def sample_sentences(n: int, seed: int, exclude: set[str] = frozenset()) -> list[tuple[Plan, str, str]]:
    """``n`` distinct (plan, French, English) triples, deterministic for a seed.

    French sentences in ``exclude`` are skipped (used to draw sentences unseen in training).
    """
    rng = random.Random(f"synth-sentences-{seed}")
    out: list[tuple[Plan, str, str]] = []
    seen = set(exclude)
    attempts = 0
    while len(out) < n:
        attempts += 1
        if attempts > 50 * n + 1000:
            raise RuntimeError(f"could only draw {len(out)} distinct sentences of {n} requested")
        plan = sample_plan(rng)
        fr, en = realise_pair(plan)
        if fr in seen or len(fr.replace("'", "' ").split()) > MAX_WORDS:
            continue
        seen.add(fr)
        out.append((plan, fr, en))
    return out
