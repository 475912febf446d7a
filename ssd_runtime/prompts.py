"""Prompts: the built-in `code`, `chat` and `pool` sets and JSONL prompt files (`prompt` text or `prompt_ids` per
line, and an optional `tag`: the request's workload class, which ssd-run writes to the trace header)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from ssd_sim.io.errors import ConfigError
from ssd_sim.io.jsonfile import parse_json, read_text_file

# Short code-completion prompts (raw text, no chat template): the workload of the CPU benchmark (its first 8).
CODE_PROMPTS: tuple[str, ...] = (
    'def fibonacci(n: int) -> int:\n    """Return the n-th Fibonacci number (0-indexed)."""\n',
    "def is_prime(n: int) -> bool:\n    \"\"\"Return True if n is a prime number.\"\"\"\n",
    "def quicksort(items: list[int]) -> list[int]:\n    \"\"\"Sort a list of integers with quicksort.\"\"\"\n",
    "def binary_search(items: list[int], target: int) -> int:\n"
    "    \"\"\"Return the index of target in the sorted list items, or -1.\"\"\"\n",
    "import json\n\n\ndef load_config(path: str) -> dict:\n    \"\"\"Read a JSON config file and return it as a dict.\"\"\"\n",
    "class Stack:\n    \"\"\"A last-in first-out stack backed by a Python list.\"\"\"\n\n    def __init__(self):\n",
    "def word_count(text: str) -> dict[str, int]:\n    \"\"\"Count how often each word occurs in text.\"\"\"\n",
    "def merge_intervals(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:\n"
    "    \"\"\"Merge overlapping closed intervals.\"\"\"\n",
    "def reverse_linked_list(head):\n    \"\"\"Reverse a singly linked list and return the new head.\"\"\"\n",
    "def flatten(nested: list) -> list:\n    \"\"\"Flatten an arbitrarily nested list.\"\"\"\n",
    # 10-23: added later (the shipped traces used the first 8); calibrate-here measures on 0-5 by default
    "def gcd(a: int, b: int) -> int:\n    \"\"\"Greatest common divisor of a and b (Euclid).\"\"\"\n",
    "def is_palindrome(text: str) -> bool:\n    \"\"\"True if text reads the same backwards, ignoring case and spaces.\"\"\"\n",
    "def transpose(matrix: list[list[float]]) -> list[list[float]]:\n    \"\"\"Return the transpose of a matrix.\"\"\"\n",
    "class LRUCache:\n    \"\"\"A least-recently-used cache with a fixed capacity.\"\"\"\n\n    def __init__(self, capacity: int):\n",
    "def read_csv_rows(path: str) -> list[dict[str, str]]:\n    \"\"\"Read a CSV file with a header row into a list of dicts.\"\"\"\n",
    "def moving_average(values: list[float], window: int) -> list[float]:\n"
    "    \"\"\"Simple moving average of values over the given window.\"\"\"\n",
    "def count_vowels(text: str) -> int:\n    \"\"\"Count the vowels in text.\"\"\"\n",
    "class Queue:\n    \"\"\"A first-in first-out queue built from two stacks.\"\"\"\n\n    def __init__(self):\n",
    "def dijkstra(graph: dict[str, dict[str, float]], source: str) -> dict[str, float]:\n"
    "    \"\"\"Shortest distances from source in a graph with non-negative edge weights.\"\"\"\n",
    "def parse_duration(text: str) -> int:\n    \"\"\"Parse a duration like '1h30m' or '45s' into seconds.\"\"\"\n",
    "def chunked(items: list, size: int) -> list[list]:\n    \"\"\"Split items into consecutive chunks of at most size elements.\"\"\"\n",
    "def levenshtein(a: str, b: str) -> int:\n    \"\"\"Edit distance between two strings.\"\"\"\n",
    "import re\n\n\ndef slugify(title: str) -> str:\n    \"\"\"Turn a title into a lowercase URL slug.\"\"\"\n",
    "def matrix_multiply(a: list[list[float]], b: list[list[float]]) -> list[list[float]]:\n"
    "    \"\"\"Multiply two matrices given as lists of rows.\"\"\"\n",
)

# Non-code prompts (raw text, no chat template): prose questions and instructions, the "chat" workload of the
# code -> chat fidelity split (bench/fidelity.py). A code model drafts prose less predictably than code.
CHAT_PROMPTS: tuple[str, ...] = (
    "Question: Why is the sky blue during the day and red at sunset?\nAnswer:",
    "Write a short, friendly email to a colleague asking to move our Tuesday meeting to Thursday.\n\nHi Sam,\n",
    "Question: What are three practical ways to improve sleep quality?\nAnswer: 1.",
    "Explain to a ten-year-old how a rainbow forms.\n\nA rainbow",
    "Summarise the plot of Romeo and Juliet in a few sentences.\n\nSummary:",
    "Question: What is the difference between weather and climate?\nAnswer:",
    "Give me a simple recipe for pancakes.\n\nIngredients:\n-",
    "Question: How does a bicycle stay upright when it is moving?\nAnswer:",
    "Write a short product description for a stainless steel water bottle.\n\n",
    "Question: What were the main causes of the French Revolution?\nAnswer:",
    "List some tips for a first-time visitor to a big city.\n\n1.",
    "Question: Why do leaves change colour in autumn?\nAnswer:",
    # 12-23: added for issue 26's random halves of a 48-prompt pool (the `pool` set); the shipped chat traces use 0-11
    "Question: How do vaccines train the immune system?\nAnswer:",
    "Write a polite note to a neighbour asking them to keep their dog quiet at night.\n\nDear neighbour,\n",
    "Describe a calm morning at a lake in a few sentences.\n\nThe lake",
    "Question: What should I pack for a three-day hiking trip?\nAnswer: 1.",
    "Explain in simple terms what inflation is and why prices rise.\n\nInflation",
    "Question: Why do we have leap years?\nAnswer:",
    "Write a short thank-you message to a teacher at the end of the school year.\n\nDear Ms. Lee,\n",
    "Give three reasons why reading books is good for children.\n\n1.",
    "Question: How do airplanes stay in the air?\nAnswer:",
    "Write the opening paragraph of a mystery story set on a train.\n\n",
    "Question: What is the best way to learn a new language as an adult?\nAnswer:",
    "Explain how to change a flat tyre on a bicycle, step by step.\n\nStep 1:",
)

# 24 more of each class for the 96-prompt pool (`pool96`): random halves of 48 requests instead of 24, so that one
# half's measured rate is a less noisy truth (bench/fidelity.py's class floor). Written in the style of the sets above;
# no shipped trace before traces/cpu-fp32-epyc-pool96i uses them.
MORE_CODE_PROMPTS: tuple[str, ...] = (
    "def factorial(n: int) -> int:\n    \"\"\"Return n! for a non-negative integer n.\"\"\"\n",
    "def rotate_list(items: list, k: int) -> list:\n    \"\"\"Rotate items to the right by k positions.\"\"\"\n",
    "def unique_sorted(items: list[int]) -> list[int]:\n    \"\"\"Return the distinct values of items in ascending order.\"\"\"\n",
    "class Counter:\n    \"\"\"Count hashable items as they are added.\"\"\"\n\n    def __init__(self):\n",
    "def celsius_to_fahrenheit(celsius: float) -> float:\n    \"\"\"Convert a temperature from Celsius to Fahrenheit.\"\"\"\n",
    "def merge_sorted(a: list[int], b: list[int]) -> list[int]:\n    \"\"\"Merge two sorted lists into one sorted list.\"\"\"\n",
    "import os\n\n\ndef list_python_files(root: str) -> list[str]:\n"
    "    \"\"\"Return the paths of every .py file below root.\"\"\"\n",
    "def bubble_sort(items: list[int]) -> list[int]:\n    \"\"\"Sort a list of integers with bubble sort.\"\"\"\n",
    "def anagrams(a: str, b: str) -> bool:\n    \"\"\"True if a and b are anagrams of each other, ignoring case.\"\"\"\n",
    "class BankAccount:\n    \"\"\"A bank account with deposits, withdrawals and a balance.\"\"\"\n\n"
    "    def __init__(self, owner: str):\n",
    "def power_set(items: list) -> list[list]:\n    \"\"\"Return every subset of items.\"\"\"\n",
    "def roman_to_int(numeral: str) -> int:\n    \"\"\"Convert a Roman numeral such as 'XIV' to an integer.\"\"\"\n",
    "def running_max(values: list[float]) -> list[float]:\n    \"\"\"The maximum of values seen so far, at each index.\"\"\"\n",
    "def validate_email(address: str) -> bool:\n    \"\"\"Return True if address looks like a valid email address.\"\"\"\n",
    "class Node:\n    \"\"\"A node of a binary search tree.\"\"\"\n\n    def __init__(self, key: int):\n",
    "def histogram(values: list[int]) -> dict[int, int]:\n    \"\"\"How many times each value occurs.\"\"\"\n",
    "def dot_product(a: list[float], b: list[float]) -> float:\n    \"\"\"Dot product of two equal-length vectors.\"\"\"\n",
    "import datetime\n\n\ndef days_between(start: str, end: str) -> int:\n"
    "    \"\"\"Number of days between two ISO dates (YYYY-MM-DD).\"\"\"\n",
    "def camel_to_snake(name: str) -> str:\n    \"\"\"Convert a camelCase name to snake_case.\"\"\"\n",
    "def top_k(values: list[float], k: int) -> list[float]:\n    \"\"\"The k largest values, largest first.\"\"\"\n",
    "def breadth_first_search(graph: dict[str, list[str]], start: str) -> list[str]:\n"
    "    \"\"\"Nodes reachable from start, in breadth-first order.\"\"\"\n",
    "def caesar_cipher(text: str, shift: int) -> str:\n    \"\"\"Shift every letter of text by shift places.\"\"\"\n",
    "def sum_of_digits(n: int) -> int:\n    \"\"\"Sum of the decimal digits of a non-negative integer.\"\"\"\n",
    "class Matrix:\n    \"\"\"A small dense matrix of floats.\"\"\"\n\n    def __init__(self, rows: int, cols: int):\n",
)

MORE_CHAT_PROMPTS: tuple[str, ...] = (
    "Question: Why does bread go stale?\nAnswer:",
    "Write a short invitation to a birthday picnic in the park on Saturday.\n\nHi everyone,\n",
    "Question: How do bees make honey?\nAnswer:",
    "Explain to a beginner what a budget is and why it helps.\n\nA budget",
    "Give four tips for staying focused while studying.\n\n1.",
    "Question: What causes the seasons on Earth?\nAnswer:",
    "Describe a busy market on a Saturday morning in a few sentences.\n\nThe market",
    "Write a short apology to a friend for missing their call yesterday.\n\nHey Alex,\n",
    "Question: Why is exercise good for mental health?\nAnswer:",
    "Summarise the story of Cinderella in a few sentences.\n\nSummary:",
    "Question: How does a refrigerator keep food cold?\nAnswer:",
    "List some ways to save water at home.\n\n1.",
    "Question: What is photosynthesis?\nAnswer:",
    "Write a short review of a cosy neighbourhood cafe.\n\n",
    "Explain how to plant a tomato seedling, step by step.\n\nStep 1:",
    "Question: Why do cats purr?\nAnswer:",
    "Give a simple recipe for a vegetable soup.\n\nIngredients:\n-",
    "Question: What are the benefits of drinking enough water?\nAnswer: 1.",
    "Write the opening paragraph of an adventure story set in the mountains.\n\n",
    "Question: How do tides work?\nAnswer:",
    "Write a short message welcoming a new member to a book club.\n\nDear Priya,\n",
    "Explain in simple terms how a credit card works.\n\nA credit card",
    "Question: What makes a good night-time routine for young children?\nAnswer:",
    "Describe the sounds of a forest after rain in a few sentences.\n\nThe forest",
)

# The issue-26 pool: every code prompt, then every chat prompt (`pool:i`, i = 0..47); random halves of it are the
# text hold-outs of bench/fidelity.py. `pool96` adds the 24 + 24 above: code 0-47 (`code`, then `more_code`), then
# chat 48-95 (`chat`, then `more_chat`). ssd_sim.io.overlap.COMPOSITE_SETS names the same parts.
POOL_PROMPTS: tuple[str, ...] = CODE_PROMPTS + CHAT_PROMPTS
POOL96_PROMPTS: tuple[str, ...] = CODE_PROMPTS + MORE_CODE_PROMPTS + CHAT_PROMPTS + MORE_CHAT_PROMPTS

PROMPT_SETS: dict[str, tuple[str, ...]] = {"code": CODE_PROMPTS, "chat": CHAT_PROMPTS, "pool": POOL_PROMPTS,
                                           "more_code": MORE_CODE_PROMPTS, "more_chat": MORE_CHAT_PROMPTS,
                                           "pool96": POOL96_PROMPTS}
# The workload class of each set's prompts (the trace's request_tags); a set not named here is its own class.
PROMPT_CLASS: dict[str, str] = {"more_code": "code", "more_chat": "chat"}
# Sets made of others, in order (their prompts keep the class of the part they come from).
COMPOSITE_PARTS: dict[str, tuple[str, ...]] = {"pool": ("code", "chat"),
                                               "pool96": ("code", "more_code", "chat", "more_chat")}


MAX_TAG_CHARS = 64  # a workload class label ("code", "chat", a user's own), not free text
TAG_PATTERN = re.compile(rf"[A-Za-z0-9_.-]{{1,{MAX_TAG_CHARS}}}")


@dataclass(frozen=True)
class Prompt:
    """One prompt: text (needs a tokenizer) or token ids (works with any model), and its workload class tag
    (None: untagged), which the trace header records per request (`request_tags`)."""

    text: str | None = None
    ids: tuple[int, ...] | None = None
    tag: str | None = None


def prompt_set(name: str) -> list[Prompt]:
    """A built-in set's prompts, each tagged with its workload class (`pool`, `pool96`: "code", then "chat")."""
    if name not in PROMPT_SETS:
        raise ConfigError("prompt_set", f"unknown prompt set {name!r}; known: {', '.join(PROMPT_SETS)}")
    if name in COMPOSITE_PARTS:
        return [p for part in COMPOSITE_PARTS[name] for p in prompt_set(part)]
    return [Prompt(text=t, tag=PROMPT_CLASS.get(name, name)) for t in PROMPT_SETS[name]]


MAX_TOKEN_ID = 2**31 - 1  # token ids are int32 in every tokenizer; larger ones are a mistake, not a vocabulary


def load_prompts(path: str | Path) -> list[Prompt]:
    """Read a JSONL prompt file; every problem (missing, a folder, binary, not UTF-8, bad JSON, too deep, a bad
    field) is a one-line ConfigError naming the file, the line and the fix."""
    p = Path(path)
    text = read_text_file(p, "prompts", 'write one {"prompt": text} or {"prompt_ids": [..]} per line '
                                        '(optionally with "tag": a workload class)')
    out = []
    for no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{p} line {no}"
        try:
            rec = parse_json(line, where)
        except ConfigError as e:
            raise ConfigError("prompts", str(e).split(": ", 1)[1]) from None
        out.append(_prompt(rec, where))
    if not out:
        raise ConfigError("prompts", f"{p} holds no prompts; write one JSON object per line")
    return out


def _prompt(rec, where: str) -> Prompt:
    """One line's Prompt; ConfigError naming `where` unless it holds exactly one valid "prompt" / "prompt_ids"
    (and, if it has one, a valid "tag")."""
    if not isinstance(rec, dict) or ("prompt" in rec) == ("prompt_ids" in rec):
        raise ConfigError("prompts", f"{where} needs exactly one of \"prompt\" (text) or \"prompt_ids\"")
    tag = rec.get("tag")
    if "tag" in rec and not (isinstance(tag, str) and TAG_PATTERN.fullmatch(tag)):
        raise ConfigError("prompts", f"{where}: \"tag\" must be a string of 1..{MAX_TAG_CHARS} letters, digits, "
                                     "'_', '-' or '.' (a workload class such as \"chat\")")
    if "prompt" in rec:
        if not isinstance(rec["prompt"], str) or not rec["prompt"]:
            raise ConfigError("prompts", f"{where}: \"prompt\" must be a non-empty string")
        return Prompt(text=rec["prompt"], tag=tag)
    ids = rec["prompt_ids"]
    if not isinstance(ids, list) or not ids or not all(
            isinstance(i, int) and not isinstance(i, bool) and 0 <= i <= MAX_TOKEN_ID for i in ids):
        raise ConfigError("prompts", f"{where}: \"prompt_ids\" must be a non-empty list of token ids "
                                     f"0..{MAX_TOKEN_ID}")
    return Prompt(ids=tuple(ids), tag=tag)


def encode(prompts: list[Prompt], tokenizer, vocab_size: int | None = None) -> list[list[int]]:
    """Token ids of every prompt; text needs the target's tokenizer."""
    out = []
    for n, pr in enumerate(prompts, start=1):
        if pr.ids is not None:
            ids = list(pr.ids)
        elif tokenizer is None:
            raise ConfigError("prompts", f"prompt {n} is text but the target model has no tokenizer; "
                                         "give \"prompt_ids\" instead")
        else:
            ids = list(tokenizer(pr.text, add_special_tokens=False)["input_ids"])
        if vocab_size is not None and max(ids) >= vocab_size:
            raise ConfigError("prompts", f"prompt {n} has token id {max(ids)} but the vocabulary has {vocab_size}")
        out.append(ids)
    return out
