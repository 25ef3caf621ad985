// Fuzz target: the small JSON files that carry keys and addresses (common/keys): a key file
// (`elastra keygen`), coordinator.json, and the join file an agent or worker on another host
// reads. Whatever parses holds valid Z85 keys, and a join file never yields admin keys.
//
// Input: byte 0 picks the parser (0 key file, 1 coordinator.json, 2 join file); the rest is the
// file's text.
#include <string>

#include "protocol/keys.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace elastra;
  fuzz::QuietLogs();
  fuzz::Input in(data, size);
  const uint8_t which = in.Byte() % 3;
  const std::string_view text = in.Rest();
  auto valid_pair = [](const KeyPair& k) {
    return IsValidZ85Key(k.public_key) && (k.secret_key.empty() || IsValidZ85Key(k.secret_key));
  };
  if (which == 0) {
    auto keys = ParseKeyFile(text, "key.json");
    if (keys.ok()) CHECK(valid_pair(*keys));
    return 0;
  }
  auto info =
      which == 1 ? ParseConnectionInfo(text, "coordinator.json") : ParseJoinFile(text, "join.json");
  if (!info.ok()) return 0;
  CHECK(!info->address.empty());
  CHECK(IsValidZ85Key(info->server_public));
  if (!info->admin.public_key.empty()) CHECK(valid_pair(info->admin));
  if (!info->worker.public_key.empty()) CHECK(valid_pair(info->worker));
  if (which == 2) {
    CHECK(info->admin.public_key.empty() && info->admin.secret_key.empty());
    CHECK(!info->worker.public_key.empty());
  }
  return 0;
}
