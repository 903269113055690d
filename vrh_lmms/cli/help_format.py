"""How `--help` reads: every option's default shown, and a long command's options under headings."""

from __future__ import annotations

import argparse


class DefaultsHelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Every option's help ends with its default, so `--help` shows what a run uses when the option is left out.

    Left alone: options without a value (None: the help says what happens then), on/off flags (off unless given)
    and helps that already show the value (`%(default)s`, or `default: X` / `default X` in their text)."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (default is None or default is argparse.SUPPRESS or action.nargs == 0 or not action.option_strings
                or "%(default)" in text):
            return text
        shown = default_text(default)
        if f"default: {shown}" in text or f"default {shown}" in text or "(default: none" in text:
            return text
        return f"{text} (default: {shown})" if text else f"default: {shown}"


def default_text(default: object) -> str:
    """How --help writes a default: lists as `a b c` (as they are typed), the rest as str()."""
    if isinstance(default, (list, tuple)):
        return " ".join(map(str, default)) if default else "none"
    if default == "":  # an empty value (no model args, no kept states): "(default: )" read as a slip
        return "none"
    return str(default).replace("%", "%%")


# The headings of a long command's --help (argparse argument groups), in order, and the options each holds (by
# dest); an option named nowhere here goes under the first, the command's own settings. A command with fewer options
# than LONG_HELP keeps one flat list.
SECTIONS: tuple[tuple[str, frozenset[str]], ...] = (
    ("this command's own settings", frozenset()),
    ("model and data", frozenset({
        "model", "model_args", "pretrained", "legacy_model", "model_dir", "demo", "tasks", "data", "docs", "limit",
        "detection_task", "grounding_tasks", "vqa_tasks", "n_discovery", "n_eval", "n_detect", "n_queries", "n_train",
        "n", "candidates", "scene_seed", "scene_start", "max_pages", "gen_kwargs", "exclude_discovery_docs"})),
    ("heads", frozenset({
        "heads_file", "heads_files", "k", "heads", "preset", "scoring", "cells", "key_tokens", "freq_top_k",
        "null_query", "no_means", "allow_cross_model", "compare_cells", "vqa_k", "overlap_k"})),
    ("controls (the head sets top-k is compared with)", frozenset({
        "random_seeds", "layer_matched", "no_layer_matched", "no_random", "control", "control_tolerance",
        "control_pool", "random_skip_layer0", "control_docs", "distractor_seed", "partner"})),
    ("statistics", frozenset({"n_resamples", "alpha", "score_field", "score_quantity", "intersection",
                              "allow_incomplete"})),
    ("output and run", frozenset({"output", "force", "wait", "config", "verbose", "batch_size", "seed", "pack",
                                  "engine", "calibrate_docs", "no_plots"})),
)
LONG_HELP = 15  # options (beyond -h) from which --help is split into SECTIONS


def _dest(args: tuple, kwargs: dict) -> str:
    """The dest argparse gives an option: `dest=`, else its first long flag (`--n-eval` -> n_eval)."""
    if "dest" in kwargs:
        return kwargs["dest"]
    flags = [a for a in args if a.startswith("--")] or list(args)
    return flags[0].lstrip("-").replace("-", "_")


class Sectioned:
    """A parser as `configure(parser)` sees it, whose options land in the SECTIONS' argument groups (shown as
    headings by --help; parsing is argparse's as ever). Everything else is the parser's own."""

    def __init__(self, parser: argparse.ArgumentParser):
        self.parser = parser
        self.groups = {title: parser.add_argument_group(title) for title, _ in SECTIONS}

    def add_argument(self, *args, **kwargs) -> argparse.Action:
        if not any(a.startswith("-") for a in args):  # a positional stays under argparse's own heading
            return self.parser.add_argument(*args, **kwargs)
        dest = _dest(args, kwargs)
        title = next((t for t, dests in SECTIONS if dest in dests), SECTIONS[0][0])
        return self.groups[title].add_argument(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self.parser, name)


class _Counting:
    """A scratch parser that counts the options (not the positionals) `configure` adds."""

    def __init__(self):
        self.parser = argparse.ArgumentParser(add_help=False)
        self.count = 0

    def add_argument(self, *args, **kwargs) -> argparse.Action:
        self.count += any(a.startswith("-") for a in args)
        return self.parser.add_argument(*args, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self.parser, name)


def sectioned_if_long(parser: argparse.ArgumentParser, configure,
                      extra: int = 0) -> argparse.ArgumentParser | Sectioned:
    """The view `configure` fills: a Sectioned one for a long command (its options, `extra` added after it
    included, counted on a scratch parser first), else the parser itself."""
    counting = _Counting()
    configure(counting)
    return Sectioned(parser) if counting.count + extra >= LONG_HELP else parser
