#!/usr/bin/env bash
# Keeps README.md's "Map of the code" and docs/README.md's index in step with the tree.
#
# The rule for the map: every top-level folder of the source tree has exactly one line
#   - [`NAME/`](NAME/): what it holds
# under "## Map of the code", and every such line names a folder that exists. A top-level folder
# is any directory in the source root except hidden ones (.git/, .ci/) and the build outputs
# .gitignore names (build*/, out/): a new folder is part of the code until it is ignored.
# The rule for the index: every file in docs/ but docs/README.md itself has exactly one line
#   - [FILE](FILE): what it is
# in docs/README.md, and every such line names a file that exists.
#
# Prints each mismatch and exits 1; exits 0 when there is none.
#
#   code_map_test.sh SOURCE_ROOT   check the tree
#   code_map_test.sh --self-test   check that the check fails on a planted missing folder, a
#                                  stale map line, an unlisted doc and a stale index line
set -euo pipefail

# The top-level folders that must be on the map.
source_folders() {
  local root=$1 dir name
  for dir in "$root"/*/; do
    [ -d "$dir" ] || continue
    name=$(basename "$dir")
    case "$name" in
      .* | build* | out) continue ;;
    esac
    echo "$name"
  done | sort
}

# The folder names of the map's lines, in order, one a line (duplicates kept).
map_folders() {
  awk '/^## Map of the code[[:space:]]*$/ { in_map = 1; next }
       /^## / { in_map = 0 }
       in_map && /^- \[`[^`]+\/`\]/ { sub(/^- \[`/, ""); sub(/\/`\].*/, ""); print }' "$1"
}

# The file names of the index's lines, one a line (duplicates kept).
index_files() {
  sed -nE 's/^- \[([^]]+)\]\(([^)]+)\).*/\1 \2/p' "$1" |
    while read -r text target; do
      [ "$text" = "$target" ] || echo "MISMATCH $text $target"
      echo "$target"
    done
}

check_tree() {
  local root=$1 failures=0 name
  report() { echo "$1"; failures=$((failures + 1)); }
  local readme=$root/README.md index=$root/docs/README.md
  [ -f "$readme" ] || { echo "no README.md in $root"; return 1; }

  local listed actual
  listed=$(map_folders "$readme")
  actual=$(source_folders "$root")
  [ -n "$listed" ] || report "README.md has no '## Map of the code' with lines like '- [\`NAME/\`](NAME/): ...'"
  for name in $actual; do
    grep -qxF "$name" <<< "$listed" ||
      report "README.md's map of the code has no line for $name/ (add '- [\`$name/\`]($name/): what it holds')"
  done
  for name in $listed; do
    [ -d "$root/$name" ] || report "README.md's map of the code names $name/, which does not exist"
  done
  for name in $(sort <<< "$listed" | uniq -d); do
    report "README.md's map of the code names $name/ more than once"
  done

  if [ ! -f "$index" ]; then
    report "no docs/README.md (the index of docs/)"
  else
    local files line file
    files=$(index_files "$index")
    while IFS= read -r line; do
      [[ "$line" == MISMATCH* ]] && report "docs/README.md: a line whose text and link differ: ${line#MISMATCH }"
    done <<< "$files"
    files=$(grep -v '^MISMATCH' <<< "$files" || true)
    for file in "$root"/docs/*; do
      [ -f "$file" ] || continue
      file=$(basename "$file")
      [ "$file" = README.md ] && continue
      grep -qxF "$file" <<< "$files" || report "docs/README.md does not list docs/$file (add '- [$file]($file): what it is')"
    done
    for file in $files; do
      [ -f "$root/docs/$file" ] || report "docs/README.md lists $file, which is not in docs/"
    done
    for file in $(sort <<< "$files" | uniq -d); do
      report "docs/README.md lists $file more than once"
    done
  fi
  [ "$failures" -eq 0 ] || return 1
  echo "code map ok: $(wc -w <<< "$actual") folders; docs index ok"
}

self_test() {
  local tmp
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  local root=$tmp/tree out
  # A tree that passes: two folders on the map, one doc in the index, and what the rule skips.
  mkdir -p "$root"/{alpha,beta,docs,.hidden,build,build-asan,out}
  write_readme() {
    cat > "$root/README.md" <<'EOF'
# A project

## Map of the code

- [`alpha/`](alpha/): the first
- [`beta/`](beta/): the second
- [`docs/`](docs/): the manual

## After the map

- [`gamma/`](gamma/): not on the map, as it is below the next heading
EOF
  }
  write_readme
  printf '# Index\n\n- [guide.md](guide.md): the guide\n' > "$root/docs/README.md"
  echo '# Guide' > "$root/docs/guide.md"
  expect_pass "a tree whose map and index match" "$root"

  mkdir "$root/planted"
  expect_fail "a folder missing from the map" "$root" "has no line for planted/"
  rmdir "$root/planted"

  sed -i 's|^- \[`beta/`\].*|&\n- [`stale/`](stale/): a folder that was moved away|' "$root/README.md"
  expect_fail "a stale line in the map" "$root" "names stale/, which does not exist"
  write_readme

  sed -i 's|^- \[`beta/`\].*|&\n&|' "$root/README.md"
  expect_fail "a folder twice in the map" "$root" "names beta/ more than once"
  write_readme

  echo '# New' > "$root/docs/new.md"
  expect_fail "a doc missing from the index" "$root" "does not list docs/new.md"
  rm "$root/docs/new.md"

  echo '- [gone.md](gone.md): a page that was removed' >> "$root/docs/README.md"
  expect_fail "a stale line in the index" "$root" "lists gone.md, which is not in docs/"
  sed -i '/gone.md/d' "$root/docs/README.md"

  expect_pass "the tree put back" "$root"
  echo "self-test ok: the check catches missing and stale map lines and index lines"
}

expect_pass() {  # expect_pass WHAT ROOT
  local out
  if ! out=$(check_tree "$2" 2>&1); then
    echo "self-test: $1 should pass, but the check said:"; echo "$out"; exit 1
  fi
}

expect_fail() {  # expect_fail WHAT ROOT MESSAGE
  local out
  if out=$(check_tree "$2" 2>&1); then
    echo "self-test: $1 should fail, but the check passed"; exit 1
  fi
  if ! grep -qF "$3" <<< "$out"; then
    echo "self-test: $1 failed without naming it ('$3'):"; echo "$out"; exit 1
  fi
}

case "${1:-}" in
  --self-test) self_test ;;
  "" | -*) echo "usage: code_map_test.sh SOURCE_ROOT | --self-test" >&2; exit 2 ;;
  *) check_tree "$1" ;;
esac
