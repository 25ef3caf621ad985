// ChangeRecordText (see records.h): a change record as the journal's line of text, written by
// hand for speed (a change at scale names every worker). Reading records back is records.cc.
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "protocol/codec.h"
#include "journal/records.h"

namespace elastra::journal {
namespace {

using nlohmann::json;

// A string JSON carries as is: printable ASCII without quote or backslash.
bool Plain(const std::string& s) {
  for (unsigned char c : s) {
    if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') return false;
  }
  return true;
}

// Appends `s` as a JSON string. Any other than a plain one is written by the JSON library, which
// escapes it and replaces bytes that are not UTF-8; `s` becomes what replay will read back.
void PutString(std::string* s, std::string* out) {
  if (Plain(*s)) {
    out->push_back('"');
    *out += *s;
    out->push_back('"');
    return;
  }
  const std::string literal = json(*s).dump(-1, ' ', false, json::error_handler_t::replace);
  *s = json::parse(literal).get<std::string>();
  *out += literal;
}

// Appends the decimal text of `v` (std::to_chars: no string made for it).
void PutInteger(int64_t v, std::string* out) {
  char buf[24];
  const auto end = std::to_chars(buf, buf + sizeof(buf), v).ptr;
  out->append(buf, static_cast<size_t>(end - buf));
}

void PutWorkers(std::vector<JournalWorker>* ws, std::string* out) {
  // About 60 bytes a worker: one allocation for the record of 16,384, not one per doubling.
  out->reserve(out->size() + ws->size() * 64 + 2);
  out->push_back('[');
  for (size_t i = 0; i < ws->size(); ++i) {
    JournalWorker& w = (*ws)[i];
    if (i > 0) out->push_back(',');
    *out += "{\"device\":";
    PutInteger(w.device, out);
    *out += ",\"host\":";
    PutString(&w.host, out);
    *out += ",\"id\":";
    PutString(&w.id, out);
    *out += ",\"pid\":";
    PutInteger(w.pid, out);
    out->push_back('}');
  }
  out->push_back(']');
}

// Appends `,"name":v`. A value that is not finite has no JSON text: it becomes -1, not known.
void PutNumber(const char* name, double* v, std::string* out) {
  if (!std::isfinite(*v)) *v = -1;
  char buf[64];
  std::snprintf(buf, sizeof(buf), ",\"%s\":%.17g", name, *v);
  *out += buf;
}

}  // namespace

std::string ChangeRecordText(JournalRecord* rec) {
  std::string text;
  if (rec->type == JournalRecordType::kBegin) {
    text = "{\"kind\":\"";
    text += ToString(rec->kind);
    text += "\",\"t\":\"begin\",\"target\":" + std::to_string(rec->target);
    if (rec->workers_of != 0) {
      text += ",\"members_of\":" + std::to_string(rec->workers_of);
      if (!rec->dropped.empty()) {
        text += ",\"dropped\":[";
        for (size_t i = 0; i < rec->dropped.size(); ++i) {
          if (i > 0) text.push_back(',');
          text += std::to_string(rec->dropped[i]);
        }
        text.push_back(']');
      }
      if (!rec->workers.empty()) {
        text += ",\"added\":";
        PutWorkers(&rec->workers, &text);
      }
    } else {
      text += ",\"workers\":";
      PutWorkers(&rec->workers, &text);
    }
    text.push_back('}');
    return text;
  }
  JournalGeneration& g = rec->generation;
  text = "{\"generation\":" + std::to_string(g.generation);
  text += ",\"layout\":{\"dp\":" + std::to_string(g.layout.dp) +
          ",\"pp\":" + std::to_string(g.layout.pp) + ",\"tp\":" + std::to_string(g.layout.tp) +
          "}";
  if (rec->members_begun) {
    text += ",\"begin\":" + std::to_string(g.generation);
  } else {
    text += ",\"members\":";
    PutWorkers(&g.members, &text);
  }
  text += ",\"reason\":\"";
  text += proto::ToString(g.reason);
  text += "\",\"t\":\"commit\"";
  PutNumber("downtime_ms", &g.downtime_ms, &text);
  PutNumber("agreement_ms", &g.agreement_ms, &text);
  PutNumber("rebuild_ms", &g.rebuild_ms, &text);
  PutNumber("transfer_ms", &g.transfer_ms, &text);
  if (g.reached_step >= 0 && g.restore_step >= 0) {
    text += ",\"reached_step\":" + std::to_string(g.reached_step) +
            ",\"restore_step\":" + std::to_string(g.restore_step);
  }
  text.push_back('}');
  return text;
}

}  // namespace elastra::journal
