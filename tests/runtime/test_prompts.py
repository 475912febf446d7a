"""ssd_runtime.prompts: the built-in sets tag each prompt with its workload class; prompt files may tag theirs."""

from __future__ import annotations

import json

import pytest

from ssd_runtime.prompts import CHAT_PROMPTS, CODE_PROMPTS, MAX_TAG_CHARS, Prompt, load_prompts, prompt_set
from ssd_sim.io.errors import ConfigError


def test_the_built_in_sets_tag_each_prompt_with_its_class():
    assert [p.tag for p in prompt_set("code")] == ["code"] * len(CODE_PROMPTS)
    assert [p.tag for p in prompt_set("chat")] == ["chat"] * len(CHAT_PROMPTS)
    pool = prompt_set("pool")
    assert [p.tag for p in pool] == ["code"] * 24 + ["chat"] * 24
    assert [p.text for p in pool] == list(CODE_PROMPTS + CHAT_PROMPTS)


def test_the_96_prompt_pool_holds_the_48_pool_prompts_and_48_new_ones_each_tagged_with_its_class():
    pool96 = prompt_set("pool96")
    assert [p.tag for p in pool96] == ["code"] * 48 + ["chat"] * 48
    assert len({p.text for p in pool96}) == 96  # no prompt twice
    assert [p.text for p in pool96[:24] + pool96[48:72]] == [p.text for p in prompt_set("pool")]
    assert {p.tag for p in prompt_set("more_code")} == {"code"} and {p.tag for p in prompt_set("more_chat")} == {"chat"}


def test_a_prompt_file_s_tags_are_read_and_lines_without_one_are_untagged(tmp_path):
    path = tmp_path / "p.jsonl"
    lines = [{"prompt": "Hi", "tag": "chat"}, {"prompt_ids": [1, 2]}, {"prompt_ids": [3], "tag": "My_class-2.v1"},
             {"prompt": "x", "tag": "a" * MAX_TAG_CHARS}]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    assert load_prompts(path) == [Prompt(text="Hi", tag="chat"), Prompt(ids=(1, 2)), Prompt(ids=(3,), tag="My_class-2.v1"),
                                  Prompt(text="x", tag="a" * MAX_TAG_CHARS)]


@pytest.mark.parametrize("tag", ["", None, 7, ["chat"], True, "a" * (MAX_TAG_CHARS + 1), "code chat", "chat/1",
                                 "chat\n", "çhat", "<b>"])
def test_a_bad_tag_is_refused_in_one_line_naming_the_line(tmp_path, tag):
    path = tmp_path / "p.jsonl"
    path.write_text(json.dumps({"prompt_ids": [1]}) + "\n" + json.dumps({"prompt_ids": [1], "tag": tag}) + "\n")
    with pytest.raises(ConfigError) as e:
        load_prompts(path)
    assert str(e.value) == (f"prompts: {path} line 2: \"tag\" must be a string of 1..{MAX_TAG_CHARS} letters, digits, "
                            "'_', '-' or '.' (a workload class such as \"chat\")")
