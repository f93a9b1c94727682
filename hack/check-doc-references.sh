#!/usr/bin/env bash
# Fail when what users read points at documents they do not have (called by `make lint`).
#
# The project's docs, help texts, CRD descriptions, chart notes and code comments must stand on
# their own: no links to files outside the repository and no references to the design documents
# the project was written from. Tests, the end-to-end suite, benchmarks and CI are not shipped to
# users and are not checked.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# Each word is spelled with one letter in brackets, which the regular expression reads as that
# letter: this file then holds none of the phrases it looks for and is checked like the rest.
pattern='\.\./shar[e]d|contrac[t] section|contrac[t]\.md|contrac[t] §|see[d] 00[0-3]|the see[d]s?\b|see[d]s'"'"'|[Ss]ee[d]'"'"'s\b'
if hits="$(git grep -nI -E "${pattern}" -- ':!tests' ':!e2e' ':!bench' ':!.ci')"; then
  echo "check-doc-references: these lines point users at documents they do not have:" >&2
  echo "${hits}" >&2
  exit 1
fi
echo "check-doc-references: no references to documents outside the project"
