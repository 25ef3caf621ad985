// EncodeJournalRecord (see records.h): a typed record as the text a storage keeps, the only place
// records become JSON. A begin or commit record is written by hand for speed (ChangeRecordText: a
// change at scale names every worker); any other is a JSON object of a few fields, dumped by the
// JSON library as the journal always wrote them. Reading records back is records.cc.
#include <charconv>
#include <cmath>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "journal/records.h"
#include "protocol/codec.h"

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

// JSON text of a record or a string, as the journal writes it.
std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// `s` with the bytes that are not UTF-8 replaced (what replay reads back), to put in a JSON object.
const std::string& Utf8(std::string* s) {
  ReplaceInvalidUtf8(s);
  return *s;
}

// Appends `s` as a JSON string. Any other than a plain one is written by the JSON library, which
// escapes it; bytes that are not UTF-8 are replaced first, so `s` is what replay will read back.
void PutString(std::string* s, std::string* out) {
  if (Plain(*s)) {
    out->push_back('"');
    *out += *s;
    out->push_back('"');
    return;
  }
  *out += Dump(Utf8(s));
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
          ",\"pp\":" + std::to_string(g.layout.pp) + ",\"tp\":" + std::to_string(g.layout.tp) + "}";
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
  if (g.groups_rebuilt > 0 || g.groups_kept > 0) {
    text += ",\"groups_rebuilt\":" + std::to_string(g.groups_rebuilt) +
            ",\"groups_kept\":" + std::to_string(g.groups_kept);
  }
  if (g.reached_step >= 0 && g.restore_step >= 0) {
    text += ",\"reached_step\":" + std::to_string(g.reached_step) +
            ",\"restore_step\":" + std::to_string(g.restore_step);
  }
  // Replay does not read them back.
  g.reached_step = -1;
  g.restore_step = -1;
  text.push_back('}');
  return text;
}

namespace {

// Any record but a change as a JSON object, its strings made what replay reads back.
json RecordJson(JournalRecord* rec) {
  switch (rec->type) {
    case JournalRecordType::kJob: {
      json r = {{"t", "job"},
                {"version", 1},
                {"job", Utf8(&rec->job)},
                {"initial_workers", rec->initial_workers},
                {"max_workers", rec->max_workers}};
      if (rec->has_bind) r["bind"] = Utf8(&rec->bind);
      if (rec->spares > 0) r["spares"] = rec->spares;
      return r;
    }
    case JournalRecordType::kJoin: {
      JournalWorker& w = rec->worker;
      json worker = {
          {"id", Utf8(&w.id)}, {"host", Utf8(&w.host)}, {"device", w.device}, {"pid", w.pid}};
      if (!w.rendezvous.empty()) worker["rv"] = HexOf(w.rendezvous);
      if (w.memory_bytes > 0) worker["mem"] = w.memory_bytes;
      return {{"t", "join"}, {"worker", std::move(worker)}};
    }
    case JournalRecordType::kWorker:
      return {{"t", "worker"}, {"id", Utf8(&rec->id)}, {"state", ToString(rec->worker_state)}};
    case JournalRecordType::kIds:
      for (std::string& id : rec->ids) ReplaceInvalidUtf8(&id);
      return {{"t", "ids"}, {"ids", rec->ids}};
    case JournalRecordType::kCheckpoint: {
      JournalCheckpoint& c = rec->checkpoint;
      json r = {{"t", "checkpoint"},
                {"step", c.step},
                {"generation", c.generation},
                {"dir", Utf8(&c.dir)}};
      if (rec->checkpoint_bytes >= 0) r["bytes"] = rec->checkpoint_bytes;
      if (rec->checkpoint_seconds >= 0) r["seconds"] = rec->checkpoint_seconds;
      return r;
    }
    case JournalRecordType::kResize:
      return {{"t", "resize"},
              {"workers", rec->resize.workers},
              {"has_layout", rec->resize.has_layout},
              {"layout", LayoutJson(rec->resize.layout)}};
    case JournalRecordType::kResizeEnd:
      return {{"t", "resize_end"},
              {"outcome", rec->resize_done ? "done" : "failed"},
              {"generation", rec->resize_generation}};
    case JournalRecordType::kResizeRefused: {
      json r = {
          {"t", "resize_refused"}, {"workers", rec->resize.workers}, {"error", Utf8(&rec->why)}};
      if (rec->resize.has_layout) r["layout"] = LayoutJson(rec->resize.layout);
      if (!rec->host.empty()) r["host"] = Utf8(&rec->host);
      return r;
    }
    case JournalRecordType::kHostLost:
      for (std::string& id : rec->ids) ReplaceInvalidUtf8(&id);
      return {{"t", "host_lost"},
              {"host", Utf8(&rec->host)},
              {"why", Utf8(&rec->why)},
              {"workers", rec->ids}};
    case JournalRecordType::kWaiting:
      return {{"t", "waiting"}, {"why", Utf8(&rec->why)}};
    case JournalRecordType::kTarget: {
      json r = {{"t", "target"}, {"workers", rec->target_workers}};
      if (rec->spares >= 0) r["spares"] = rec->spares;
      return r;
    }
    case JournalRecordType::kState:
      return {{"t", "state"}, {"spec", HexOf(proto::EncodePayload(rec->state))}};
    case JournalRecordType::kEnd: {
      json r = {{"t", "end"}, {"outcome", ToString(rec->outcome)}, {"reason", Utf8(&rec->reason)}};
      if (rec->end_checkpoint_step >= 0) {
        r["checkpoint_step"] = rec->end_checkpoint_step;
        r["checkpoint_dir"] = Utf8(&rec->end_checkpoint_dir);
      }
      return r;
    }
    case JournalRecordType::kBegin:
    case JournalRecordType::kCommit:
      break;  // ChangeRecordText
  }
  return json::object();
}

}  // namespace

std::string EncodeJournalRecord(JournalRecord* rec) {
  if (rec->type == JournalRecordType::kBegin || rec->type == JournalRecordType::kCommit) {
    return ChangeRecordText(rec);
  }
  return Dump(RecordJson(rec));
}

bool ReplaceInvalidUtf8(std::string* s) {
  static constexpr char kReplacement[] = "\xEF\xBF\xBD";  // U+FFFD
  const auto* p = reinterpret_cast<const unsigned char*>(s->data());
  const size_t n = s->size();
  std::string out;
  bool replaced = false;
  size_t copied = 0;  // (*s)[0, copied) is in `out` already
  for (size_t i = 0; i < n;) {
    const unsigned char c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    // The sequence `c` starts (its length, the range of its second byte), as RFC 3629 allows:
    // no overlong form, no surrogate, nothing past U+10FFFF.
    size_t length = 0;
    unsigned char lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) {
      length = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      length = 3;
      if (c == 0xE0) lo = 0xA0;
      if (c == 0xED) hi = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      length = 4;
      if (c == 0xF0) lo = 0x90;
      if (c == 0xF4) hi = 0x8F;
    }
    size_t k = 1;  // bytes of it that are right
    for (; k < length && i + k < n; ++k) {
      const unsigned char b = p[i + k];
      if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) break;
    }
    if (length > 0 && k == length) {
      i += length;
      continue;
    }
    // The library drops a byte that starts nothing, or the start of a sequence up to the byte
    // that breaks it (read again as a start) or up to the end, and writes one U+FFFD instead.
    if (!replaced) out.reserve(n + 8);
    replaced = true;
    out.append(*s, copied, i - copied);
    out += kReplacement;
    i += k;
    copied = i;
  }
  if (!replaced) return false;
  out.append(*s, copied, n - copied);
  *s = std::move(out);
  return true;
}

}  // namespace elastra::journal
