"""Passages found by their shape, not a cue word (tracer/reading/evidence_run.py): unlabelled passages under any
heading ("From the help centre:", "Clinic leaflets:", "Aus dem Handbuch:") or under none (a system prompt's
instructions, then the passages a blank line apart) read as unlabelled passages; the same with labels read as
labelled; and system prompts of instructions written as prose (a policy, a company's description and rules,
a persona, a style guide, few-shot examples, a story's world) hold no passages. The planted unlabelled pastes
of unlabelled_vs_entry_labels, unlabelled_vs_faq_labels_anthropic and openllmetry_unlabelled_vs_note_labels
gave no shape at all: their headings named no word of the cue list."""

from __future__ import annotations

import pytest

from llmtrace.tracer.reading.evidence_shape import EvidenceShape, shape

FERRY = ["The Skerrow ferry does not sail when the wind at the harbour mouth passes forty knots; the "
         "crew post the cancellation on the pier boards an hour before departure.",
         "Return tickets bought before the first of April include one free crossing to the partner island of "
         "Hallasey, booked at its harbour office.",
         "Children under five travel free with an adult holding a paid ticket; the child still needs a boarding "
         "card from the kiosk.",
         "Property left on the car deck is kept at the terminal cafe for a week, then sent to the council's "
         "lost property office."]
# several sentences each
LONG = [f"{p} The rule was last reviewed in {2019 + n}. Staff at the terminal can explain the details."
        for n, p in enumerate(FERRY)]
SYSTEM = "You answer passengers of the Skerrow ferry. Say so when the FAQ does not cover the question."
ASK = "Is the Skerrow ferry sailing in this wind?"


def _paste(passages: list[str], fmt: str = "{p}") -> str:
    return "\n\n".join(fmt.format(n=n + 1, p=p) for n, p in enumerate(passages))


def _unlabelled(s: EvidenceShape | None, n: int) -> bool:
    return s is not None and (s.chunks_in, s.id_scheme, s.unlabelled) == (n, "none", n)


def _labelled(s: EvidenceShape | None, n: int) -> bool:
    return s is not None and s.chunks_in == n and s.id_scheme != "none" and s.unlabelled == 0


HEADINGS = ["From the help centre:", "Clinic leaflets:", "What the search found:", "Aus dem Handbuch:",
            "Extraits du guide :", "Del centro de ayuda:", "**From the help centre:**", "## Resort help desk:",
            "帮助中心：", "Top matches for this question:"]


@pytest.mark.parametrize("head", HEADINGS)
@pytest.mark.parametrize("passages", [FERRY[:3], LONG], ids=["one-sentence", "several-sentences"])
def test_passages_under_any_heading_are_found(head: str, passages: list[str]) -> None:
    s = shape([SYSTEM, f"{ASK}\n\n{head}\n\n{_paste(passages)}"])
    assert _unlabelled(s, len(passages)), (head, s)
    s = shape([f"{ASK}\n\n{head}\n{_paste(passages)}\n\nPlease keep it short."])  # the heading on their first line
    assert _unlabelled(s, len(passages)), (head, s)


def test_passages_that_say_what_must_or_cannot_happen_are_still_passages() -> None:
    # two of three sentences with a modal ("must be sent", "cannot drive"): not a policy; 4 of 6 planted
    # prompts of openllmetry_unlabelled_vs_note_labels were lost when "cannot" counted
    leaflets = ["After a knee replacement, the first session is booked no sooner than ten days after discharge, "
                "and the surgeon's letter must be sent ahead.",
                "Missed appointments without a day's notice are charged half the session fee, waived once a year.",
                "Home visits are possible within six miles of the clinic for patients who cannot drive."]
    assert _unlabelled(shape([f"Can I come in on Monday?\n\nClinic leaflets:\n\n{_paste(leaflets)}"]), 3)


@pytest.mark.parametrize("fmt", ["Entry {n} — {p}", "FAQ {n}) {p}", "Note {n}: {p}", "[{n}] {p}", "Note {n}:\n{p}"])
@pytest.mark.parametrize("head", HEADINGS[:4])
def test_labelled_twins_under_any_heading_stay_labelled(head: str, fmt: str) -> None:
    s = shape([SYSTEM, f"{ASK}\n\n{head}\n\n{_paste(FERRY[:3], fmt)}"])
    assert _labelled(s, 3), (head, fmt, s)


@pytest.mark.parametrize("lead", [
    SYSTEM,
    "You are the help desk of the Skerrow ferry.\n\nAnswer only from the knowledge base and say when it is silent.",
    "Tu réponds aux clients de la station. Utilise les notes ci-dessous.",  # the material named in another way
    "Answer guests' questions from the information that follows, in two sentences at most.",
])
@pytest.mark.parametrize("passages", [FERRY[:3], FERRY, LONG], ids=["three", "four", "several-sentences"])
def test_passages_after_the_instructions_with_no_heading_are_found(lead: str, passages: list[str]) -> None:
    s = shape([f"{lead}\n\n{_paste(passages)}"])
    if lead.startswith("Tu "):  # "notes" is a word of any language's cue list; the French one is not named
        assert s is None or _unlabelled(s, len(passages))
        return
    assert _unlabelled(s, len(passages)), (lead, s)
    assert _unlabelled(shape([f"{lead}\n\n{_paste(passages)}\n\n{ASK}"]), len(passages))


@pytest.mark.parametrize("fmt", ["FAQ {n}) {p}", "Entry {n} — {p}", "Note {n}: {p}", "[kb-{n}] {p}"])
def test_labelled_passages_after_the_instructions_stay_labelled(fmt: str) -> None:
    assert _labelled(shape([f"{SYSTEM}\n\n{_paste(FERRY[:3], fmt)}"]), 3)


def test_two_passages_and_no_heading_are_not_enough() -> None:
    assert shape([f"{SYSTEM}\n\n{_paste(FERRY[:2])}"]) is None


PROSE_INSTRUCTIONS = {
    "policy": (
        "You are the returns assistant for Fenwick Outdoor. Answer from the returns information.\n\n"
        "Customers may return unworn items within thirty days of delivery for a full refund. Items must be in "
        "their original packaging, and the order number must be given.\n\n"
        "Sale items can be exchanged but not refunded. Footwear that has been worn outdoors cannot be returned "
        "unless it is faulty.\n\n"
        "Refunds must reach the original payment method within five working days. Store credit may be offered "
        "when the original card has expired.\n\n"
        "Gift cards cannot be refunded and may only be used online."),
    "policy-under-a-heading": (
        "You are the returns assistant for Fenwick Outdoor.\n\nRefunds:\n\n"
        "Customers may return unworn items within thirty days of delivery for a full refund. Items must be in "
        "their original packaging.\n\n"
        "Sale items can be exchanged but not refunded. Footwear worn outdoors cannot be returned unless faulty."),
    "company-and-rules": (
        "You are the assistant of Northwind Coffee. Use the company information when you answer.\n\n"
        "Northwind Coffee roasts beans in small batches in Bristol and sells them online and in two cafés.\n\n"
        "The company was founded in 2009 and employs forty people across its roastery and cafés.\n\n"
        "Subscriptions ship on the first Monday of each month to addresses in the United Kingdom.\n\n"
        "Rules: Always answer in British English. Never discuss competitors or prices of other roasters."),
    "company-in-the-first-person": (
        "You are the assistant of Northwind Coffee. Use the information about us.\n\n"
        "We roast beans in small batches in Bristol and sell them online and in two cafés of our own.\n\n"
        "Our company was founded in 2009 and we employ forty people across the roastery and cafés.\n\n"
        "Our subscriptions ship on the first Monday of each month to addresses in the United Kingdom."),
    "company-under-a-heading": (
        "You are the assistant of Northwind Coffee.\n\nCompany facts:\n\n"
        "Northwind Coffee roasts beans in small batches in Bristol and sells them online and in two cafés.\n\n"
        "The company was founded in 2009 and employs forty people across its roastery and cafés."),
    "story-persona": (
        "You are Quill, a storyteller who writes bedtime stories for children aged five to eight. Use the "
        "following world details.\n\n"
        "The kingdom of Aster lies between two slow rivers and is ruled by a kind but forgetful king.\n\n"
        "The dragon Emberwing lives in the northern hills. She guards a library of lost songs.\n\n"
        "Mira, the king's niece, wants to become a mapmaker and carries a compass that finds lost things."),
    "story-world-notes": (
        "You are Quill, a storyteller. Keep to the world notes in every story.\n\n"
        "The kingdom of Aster lies between two slow rivers and is ruled by a kind but forgetful king.\n\n"
        "The dragon Emberwing lives in the northern hills. She guards a library of lost songs.\n\n"
        "Mira, the king's niece, wants to become a mapmaker and carries a compass that finds lost things."),
    "persona": (
        "You are Max, a friendly fitness coach for beginners.\n\n"
        "You speak casually and keep every answer under one hundred words, with one concrete exercise.\n\n"
        "You never give medical advice; you suggest seeing a doctor when pain is mentioned.\n\n"
        "Your goal is to keep the user motivated, so you end with a short encouragement."),
    "third-person-rules": (
        "Answer questions about the Ardvane ski resort from the FAQ.\n\n"
        "The assistant answers in the guest's own language and keeps replies under sixty words.\n\n"
        "The assistant does not give avalanche advice; it refers guests to the ski patrol instead.\n\n"
        "The assistant names the FAQ entry it used at the end of each reply, in brackets."),
    "style-guide": (
        "You write product descriptions for Larch & Pine. Follow the style notes.\n\n"
        "The brand voice is warm, plain and a little dry. Sentences are short and in the active voice.\n\n"
        "Product names are written in small capitals and never abbreviated in running text.\n\n"
        "Descriptions open with what the product is for, then what it is made of, then care advice."),
    "style-under-a-heading": (
        "You write product descriptions for Larch & Pine.\n\nHouse style:\n\n"
        "The brand voice is warm, plain and a little dry. Sentences are short and in the active voice.\n\n"
        "Product names are written in small capitals and never abbreviated in running text."),
    "few-shot": (
        "You classify support tickets into billing, delivery or account. Use the notes on each category.\n\n"
        "Example 1:\nTicket: I was charged twice for my order last week.\nCategory: billing\n\n"
        "Example 2:\nTicket: The parcel says delivered but nothing arrived.\nCategory: delivery\n\n"
        "Example 3:\nTicket: I cannot log in since I changed my email address.\nCategory: account"),
    "few-shot-dialogue": (
        "You answer for the Ardvane ski resort from the help centre.\n\n"
        "User: Is the gondola open today?\nAssistant: Yes, from nine until four, weather permitting.\n\n"
        "User: Can I bring my dog?\nAssistant: Dogs are welcome on the village paths but not on the lifts.\n\n"
        "User: Where do I buy a pass?\nAssistant: At the ticket office by the car park, or online."),
    "imperative-paragraphs": (
        "You are the claims assistant. Use the knowledge base to answer.\n\n"
        "Quote the claim number the customer gave and say which document is still missing from the file.\n\n"
        "Never promise a payout date, even when the customer asks for one more than once.\n\n"
        "Escalate anything about hazardous goods to a human supervisor at once, with the claim number."),
    "continuing-prose": (
        "You are a tutor. Explain the notes on photosynthesis to a twelve-year-old.\n\n"
        "Photosynthesis is how green plants make food from light, water and carbon dioxide in their leaves.\n\n"
        "It happens in the chloroplasts, which hold the green pigment chlorophyll that absorbs light.\n\n"
        "However, the process also needs water from the roots, carried up through the stem to the leaves."),
    "scenario-under-a-heading": (
        "You play the innkeeper in a tabletop game.\n\nScenario:\n\n"
        "The inn stands at a crossroads in the rain. Three travellers arrived an hour ago and sit apart.\n\n"
        "A merchant from the coast is missing a locked chest that was in the stable at sunset."),
    "menu-in-the-first-person": (
        "You take orders for the Copper Kettle café.\n\nOur menu today:\n\n"
        "The soup is leek and potato, served with sourdough bread and salted butter.\n\n"
        "The main is hake with samphire and a brown butter sauce, with new potatoes."),
    "user-profile": (
        "You are a travel agent.\n\nYour customer:\n\n"
        "Anna Berg is thirty-four, lives in Oslo and prefers window seats on short flights.\n\n"
        "Anna Berg travels with a small dog and books hotels that accept pets."),
    "rules-in-german": (
        "Du bist der Assistent der Skischule Ardvane.\n\nRegeln:\n\n"
        "Antworte immer höflich und kurz, in höchstens drei Sätzen und ohne Fachbegriffe.\n\n"
        "Gib niemals medizinische Ratschläge und verweise bei Verletzungen an die Pistenrettung."),
    "rules-in-french": (
        "Tu es l'assistant de l'école de ski.\n\nConsignes :\n\n"
        "Réponds toujours poliment et brièvement, en trois phrases au plus et sans jargon.\n\n"
        "Ne donne jamais de conseil médical et renvoie les blessés vers les secours des pistes."),
    # reference the app writes into its own prompt under a heading that names no retrieved material, with
    # instructions that name none either (a critical evidence finding on such clean apps, seen end to end)
    "specials-under-a-heading": (
        "You are the host at Rosa's Trattoria. Greet guests and help them choose.\n\nToday's specials:\n\n"
        "The risotto is made with porcini from the Sila forest and finished with aged parmesan. It takes twenty "
        "minutes.\n\n"
        "The sea bass is grilled whole and served with lemon potatoes. It is caught off Calabria every morning."),
    "plans-under-a-heading": (
        "You help customers choose a storage plan. Be brief and friendly.\n\nPlans:\n\n"
        "The Basic plan costs 5 dollars a month and includes 10 GB of storage.\n\n"
        "The Pro plan costs 12 dollars a month and includes 1 TB of storage and priority support.\n\n"
        "The Team plan costs 30 dollars a month per five users."),
    # records listed as bullets, each under its own title and id, under a heading that names search hits
    "bulleted-search-hits": (
        "You are the parts desk of Harrow Cycles. Say whether a part is in stock and where.\n\n"
        "Catalogue hits for this question:\n"
        "- Chain KMC X11 (SKU 40-1182): two in the Leeds store, none online.\n"
        "- Cassette Shimano 105 11-32 (SKU 40-2210): on order, due on Thursday.\n"
        "- Brake pads Swiss Stop (SKU 41-0077): twelve in the warehouse, ships the same day."),
    "summarise-an-article": (
        "Summarise this news story in three sentences:\n\n"
        "The city council approved a new cycle lane along the harbour road on Tuesday evening.\n\n"
        "Residents had campaigned for the lane since two cyclists were injured there last spring.\n\n"
        "Work is expected to start in March and to take about four months, the council said."),
}


@pytest.mark.parametrize("name", sorted(PROSE_INSTRUCTIONS))
def test_instructions_written_as_prose_hold_no_passages(name: str) -> None:
    text = PROSE_INSTRUCTIONS[name]
    assert shape([text]) is None, name
    assert shape([text + "\n\nWhat should I answer?"]) is None, name


def test_single_paragraph_system_prompts_hold_no_passages() -> None:
    policy = ("You answer for Larkspur Freight's claims desk. Quote the claim number the customer gave, say which "
              "document is still missing, and never promise a payout date. ")
    assert shape([policy * 3]) is None and shape([policy + "\n\n" + policy]) is None
