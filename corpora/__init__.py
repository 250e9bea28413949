"""Corpus readers that produce the utterance table, and the built-in synthetic corpus.

`corpora.base` holds the conventions every other package shares (`errors.UserError`: one
clear line, exit code 2; `atomic`: temp file + os.replace; `provenance`: versions, git sha,
config hashes; `textfile`: UTF-8 or one line naming the file and line).
"""
