// The pieces of fuzz_make_corpus that its files share (make_corpus.cc: the codec's and the core's
// seeds and main; make_corpus_files.cc: the seeds of the files the real writers produce;
// make_corpus_http.cc: the HTTP API's requests).
#pragma once

#include <cstdint>
#include <string>

namespace elastra::fuzz {

// Writes `bytes` as DIR/<target>/seed-<name>, DIR being the generator's argument.
void Write(const std::string& target, const std::string& name, const std::string& bytes);
// The same, for a recorded session, printing the generation the coordinator reached.
void Write(const std::string& target, const std::string& name, const std::string& bytes,
           uint64_t generation);

// A model description as a user writes one (docs/planner.md).
inline constexpr char kModelJson[] =
    R"({"layers":4,"hidden":256,"heads":8,"vocab":1000,"seq_len":128,"global_batch":32,)"
    R"("micro_batch":2,"dtype":"bf16","optimizer":"adam","zero":1,"device_memory_gib":16})";

// The seeds of the files the real writers produce (make_corpus_files.cc).
void CheckpointSeeds();
void JournalSeeds();
void ModelSeeds();
void KeySeeds();
// The HTTP API's requests (make_corpus_http.cc).
void HttpSeeds();

}  // namespace elastra::fuzz
