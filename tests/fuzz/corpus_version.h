// The encodings a seed corpus was written for: tests/fuzz/corpus/VERSION, which fuzz_make_corpus
// writes beside the seeds and FuzzCorpus.version compares with the code (corpus_version_check.cc),
// so a corpus left on an older protocol, journal or checkpoint format fails `make test` instead
// of fuzzing encodings the code no longer speaks.
#pragma once

#include <string>

#include "checkpoint/format.h"
#include "journal/file_storage.h"
#include "protocol/message_vocabulary.h"

namespace elastra::fuzz {

// "protocol N\njournal EJR1\ncheckpoint N\n", from the constants compiled into the caller.
inline std::string CorpusVersion() {
  std::string magic;
  for (int shift = 0; shift < 32; shift += 8) {
    magic += static_cast<char>((journal::FileJournalStorage::kMagic >> shift) & 0xFF);
  }
  return "protocol " + std::to_string(proto::kProtocolVersion) + "\njournal " + magic +
         "\ncheckpoint " + std::to_string(checkpoint::kFormatVersion) + "\n";
}

}  // namespace elastra::fuzz
