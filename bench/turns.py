"""Conversational turns for the benches: one to three sentences a turn, as people write to an
assistant, made from templates and word lists (not from any dataset), seeded."""

from __future__ import annotations

import random

PEOPLE = ["I", "we", "my sister", "my brother", "my wife", "my husband", "my boss", "Anna",
          "Marco", "the kids", "my friend Sam", "our neighbour", "my mom", "my dad", "Priya",
          "Tom", "my team", "Lena", "my partner", "Jorge"]
DOINGS = ["went hiking", "started learning Spanish", "booked a flight", "cooked dinner",
          "adopted a puppy", "moved to a new apartment", "finished the report",
          "signed up for a marathon", "visited the museum", "lost my keys again",
          "tried a vegetarian recipe", "planned a birthday party", "fixed the bike",
          "watched a documentary", "painted the kitchen", "read a novel", "got a promotion",
          "took a pottery class", "went to a jazz concert", "planted tomatoes",
          "ran five kilometres", "called the dentist", "bought a used car",
          "started a podcast", "went camping by the lake"]
WHENS = ["yesterday", "last weekend", "this morning", "on Friday", "two weeks ago",
         "last summer", "tonight", "in March", "after work", "over the holidays"]
PLACES = ["in Lisbon", "near the river", "at the community centre", "in the mountains",
          "downtown", "at my parents' house", "in Kyoto", "by the beach", "at the office",
          "in the park"]
FEELINGS = ["It was honestly great.", "I was so tired afterwards.", "Not sure it was worth it.",
            "Everyone loved it!", "It took way longer than I expected.",
            "I think I'll do it again soon.", "The weather was terrible though.",
            "It cost more than we planned.", "I'm still thinking about it."]
ASKS = ["Can you remind me to {task} {when}?", "What should I bring for {thing}?",
        "Do you remember what {person} said about {thing}?",
        "Any tips for {thing}?", "How long does {thing} usually take?"]
TASKS = ["call the plumber", "water the plants", "send the invoice", "pick up the dry cleaning",
         "book the hotel", "renew my passport", "email the landlord", "buy a gift"]
THINGS = ["the trip", "a picnic", "the interview", "a long hike", "the wedding",
          "the move", "training for the race", "the dinner party", "a week in Japan"]
PREFERENCES = ["I prefer {a} over {b}.", "I really don't like {a}.", "{a} is my favourite.",
               "I'm allergic to {a}.", "I usually have {a} for breakfast."]
STUFF = ["green tea", "coffee", "spicy food", "peanuts", "oat milk", "early mornings",
         "window seats", "quiet hotels", "dark chocolate", "long meetings", "sushi",
         "crowded trains", "cats", "dogs", "jazz", "podcasts"]


def _sentence(rng: random.Random) -> str:
    kind = rng.random()
    if kind < 0.45:
        who = rng.choice(PEOPLE)
        said = f"{who} {rng.choice(DOINGS)} {rng.choice(WHENS)}"
        if rng.random() < 0.5:
            said += f" {rng.choice(PLACES)}"
        return said[0].upper() + said[1:] + "."
    if kind < 0.65:
        return rng.choice(FEELINGS)
    if kind < 0.85:
        return rng.choice(ASKS).format(task=rng.choice(TASKS), when=rng.choice(WHENS),
                                       thing=rng.choice(THINGS),
                                       person=rng.choice(PEOPLE[3:]))
    a, b = rng.sample(STUFF, 2)
    said = rng.choice(PREFERENCES).format(a=a, b=b)
    return said[0].upper() + said[1:]


def turn(rng: random.Random) -> str:
    """One turn: one to three sentences."""
    return " ".join(_sentence(rng) for _ in range(rng.choice((1, 1, 2, 2, 2, 3))))
