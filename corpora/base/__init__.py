"""The base layer every gendergap package may import: nothing here knows about corpora.

- `errors`: `UserError`, the one-line message with exit code 2 for bad input;
- `atomic`: write to a temp file, then `os.replace`, so nothing is left half-written;
- `provenance`: versions, git sha and config hashes that travel with every result row;
- `textfile`: the one reader of handed line files (`read_lines`) and tables (`read_delimited`):
  strict UTF-8 naming the file and line on bad bytes, lines split on `\n` only;
- `units`: parameter counts and byte sizes as tables print them.

It lives under `corpora/` because corpora is the foot of the one-way data flow
(corpora -> manifests -> ssl_pretrain -> downstream_* -> analysis), so any package may import
it without importing upward.
"""
