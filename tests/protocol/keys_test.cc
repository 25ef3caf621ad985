#include "protocol/keys.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace elastra {
namespace {

namespace fs = std::filesystem;

class KeysTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "elastra-keys-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Path(const std::string& name) { return (fs::path(dir_) / name).string(); }
  void WriteRaw(const std::string& path, const std::string& text) {
    std::ofstream(path) << text;
  }
  int Mode(const std::string& path) {
    struct stat st {};
    EXPECT_EQ(stat(path.c_str(), &st), 0);
    return st.st_mode & 0777;
  }
  std::string dir_;
};

TEST_F(KeysTest, GeneratedKeysAreValidAndDistinct) {
  auto a = GenerateKeyPair();
  auto b = GenerateKeyPair();
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(IsValidZ85Key(a->public_key));
  EXPECT_TRUE(IsValidZ85Key(a->secret_key));
  EXPECT_NE(a->public_key, b->public_key);
  EXPECT_NE(a->public_key, a->secret_key);
}

TEST_F(KeysTest, Z85Validation) {
  auto k = GenerateKeyPair();
  ASSERT_TRUE(k.ok());
  EXPECT_FALSE(IsValidZ85Key(""));
  EXPECT_FALSE(IsValidZ85Key(k->public_key.substr(0, 39)));
  EXPECT_FALSE(IsValidZ85Key(k->public_key + "0"));
  std::string bad = k->public_key;
  bad[3] = '"';  // not in the Z85 alphabet
  EXPECT_FALSE(IsValidZ85Key(bad));
  bad[3] = ' ';
  EXPECT_FALSE(IsValidZ85Key(bad));
  // "#####" is 85^5 - 1 > 2^32 - 1: does not decode to four bytes.
  EXPECT_FALSE(IsValidZ85Key(std::string(40, '#')));
  EXPECT_TRUE(IsValidZ85Key(std::string(40, '0')));
}

TEST_F(KeysTest, KeyFileRoundTripWithMode0600) {
  auto k = GenerateKeyPair();
  ASSERT_TRUE(k.ok());
  const std::string path = Path("worker.key");
  ASSERT_TRUE(WriteKeyFile(path, *k).ok());
  EXPECT_EQ(Mode(path), 0600);
  auto back = ReadKeyFile(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->public_key, k->public_key);
  EXPECT_EQ(back->secret_key, k->secret_key);
  // Public-only key files are allowed.
  ASSERT_TRUE(WriteKeyFile(Path("pub.key"), KeyPair{k->public_key, ""}).ok());
  auto pub = ReadKeyFile(Path("pub.key"));
  ASSERT_TRUE(pub.ok());
  EXPECT_TRUE(pub->secret_key.empty());
  // Refuses to write malformed keys.
  EXPECT_EQ(WriteKeyFile(Path("x.key"), KeyPair{"short", ""}).code(),
            StatusCode::kInvalidArgument);
}

TEST_F(KeysTest, KeyFileErrors) {
  EXPECT_EQ(ReadKeyFile(Path("missing.key")).status().code(), StatusCode::kNotFound);
  WriteRaw(Path("garbage.key"), "{not json");
  EXPECT_EQ(ReadKeyFile(Path("garbage.key")).status().code(), StatusCode::kCorrupt);
  WriteRaw(Path("badkey.key"), R"({"public": "tooshort"})");
  EXPECT_EQ(ReadKeyFile(Path("badkey.key")).status().code(), StatusCode::kCorrupt);
}

ConnectionInfo SampleInfo() {
  ConnectionInfo info;
  info.address = "tcp://127.0.0.1:40123";
  info.job = "mlp";
  info.server_public = GenerateKeyPair()->public_key;
  info.admin = *GenerateKeyPair();
  info.worker = *GenerateKeyPair();
  info.pid = 1234;
  return info;
}

TEST_F(KeysTest, ConnectionInfoRoundTripAtomicAndPrivate) {
  const ConnectionInfo info = SampleInfo();
  const std::string path = Path("coordinator.json");
  ASSERT_TRUE(WriteConnectionInfo(path, info).ok());
  EXPECT_EQ(Mode(path), 0600);
  // Overwrite: still one file, no temporaries left behind.
  ConnectionInfo second = info;
  second.address = "tcp://127.0.0.1:40124";
  ASSERT_TRUE(WriteConnectionInfo(path, second).ok());
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir_)) {
    (void)entry;
    ++files;
  }
  EXPECT_EQ(files, 1);
  auto back = ReadConnectionInfo(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->address, second.address);
  EXPECT_EQ(back->job, "mlp");
  EXPECT_EQ(back->server_public, info.server_public);
  EXPECT_EQ(back->admin.public_key, info.admin.public_key);
  EXPECT_EQ(back->admin.secret_key, info.admin.secret_key);
  EXPECT_EQ(back->worker.secret_key, info.worker.secret_key);
  EXPECT_EQ(back->pid, 1234);
}

// The join file carries what an agent or worker needs and no admin key: its holder cannot resize.
TEST_F(KeysTest, JoinFileHoldsNoAdminKey) {
  const ConnectionInfo info = SampleInfo();
  const std::string path = Path("join.json");
  ASSERT_TRUE(WriteJoinFile(path, info).ok());
  EXPECT_EQ(Mode(path), 0600);
  std::ifstream in(path);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(text.find(info.admin.public_key), std::string::npos) << text;
  EXPECT_EQ(text.find(info.admin.secret_key), std::string::npos) << text;
  EXPECT_EQ(text.find("\"admin\""), std::string::npos) << text;
  auto back = ReadJoinFile(path);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->address, info.address);
  EXPECT_EQ(back->job, info.job);
  EXPECT_EQ(back->server_public, info.server_public);
  EXPECT_EQ(back->worker.public_key, info.worker.public_key);
  EXPECT_EQ(back->worker.secret_key, info.worker.secret_key);
  EXPECT_TRUE(back->admin.public_key.empty());
  // A coordinator.json read as a join file gives up its admin key too.
  const std::string full = Path("coordinator.json");
  ASSERT_TRUE(WriteConnectionInfo(full, info).ok());
  auto as_join = ReadJoinFile(full);
  ASSERT_TRUE(as_join.ok()) << as_join.status();
  EXPECT_TRUE(as_join->admin.secret_key.empty());
  // Without a worker key pair it is no join file.
  ConnectionInfo admin_only = info;
  admin_only.worker = KeyPair{};
  ASSERT_TRUE(WriteConnectionInfo(full, admin_only).ok());
  EXPECT_EQ(ReadJoinFile(full).status().code(), StatusCode::kCorrupt);
  EXPECT_EQ(WriteJoinFile(path, admin_only).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ReadJoinFile(Path("missing.json")).status().code(), StatusCode::kNotFound);
}

// "http" is optional: absent without --http, kept when present, never in a join file; unknown
// fields are ignored (a newer coordinator's file stays readable).
TEST_F(KeysTest, ConnectionInfoHttpIsOptional) {
  ConnectionInfo info = SampleInfo();
  const std::string path = Path("coordinator.json");
  ASSERT_TRUE(WriteConnectionInfo(path, info).ok());
  {
    std::ifstream in(path);
    const std::string text((std::istreambuf_iterator<char>(in)), {});
    EXPECT_EQ(text.find("\"http\""), std::string::npos) << text;
  }
  auto without = ReadConnectionInfo(path);
  ASSERT_TRUE(without.ok()) << without.status();
  EXPECT_TRUE(without->http.empty());
  info.http = "http://127.0.0.1:8080";
  ASSERT_TRUE(WriteConnectionInfo(path, info).ok());
  auto with = ReadConnectionInfo(path);
  ASSERT_TRUE(with.ok()) << with.status();
  EXPECT_EQ(with->http, "http://127.0.0.1:8080");
  ASSERT_TRUE(WriteJoinFile(Path("join.json"), info).ok());
  std::ifstream join(Path("join.json"));
  const std::string join_text((std::istreambuf_iterator<char>(join)), {});
  EXPECT_EQ(join_text.find("\"http\""), std::string::npos) << join_text;

  WriteRaw(Path("e.json"), R"({"address": "tcp://x:1", "job": "j", "server_public": ")" +
                               info.server_public + R"(", "http": 8080})");
  EXPECT_EQ(ReadConnectionInfo(Path("e.json")).status().code(), StatusCode::kCorrupt);
  WriteRaw(Path("f.json"), R"({"address": "tcp://x:1", "job": "j", "server_public": ")" +
                               info.server_public + R"(", "future": {"x": 1}})");
  EXPECT_TRUE(ReadConnectionInfo(Path("f.json")).ok());
}

TEST_F(KeysTest, ConnectionInfoErrorsAreClear) {
  auto missing = ReadConnectionInfo(Path("coordinator.json"));
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("coordinator.json"), std::string::npos);

  WriteRaw(Path("a.json"), "");
  EXPECT_EQ(ReadConnectionInfo(Path("a.json")).status().code(), StatusCode::kCorrupt);
  WriteRaw(Path("b.json"), "[1,2]");
  EXPECT_EQ(ReadConnectionInfo(Path("b.json")).status().code(), StatusCode::kCorrupt);
  WriteRaw(Path("c.json"), R"({"address": "tcp://x:1", "job": "j"})");
  auto no_key = ReadConnectionInfo(Path("c.json"));
  EXPECT_EQ(no_key.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(no_key.status().message().find("server_public"), std::string::npos);

  ConnectionInfo info = SampleInfo();
  ASSERT_TRUE(WriteConnectionInfo(Path("d.json"), info).ok());
  std::ifstream in(Path("d.json"));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto pos = text.find(info.admin.secret_key);
  ASSERT_NE(pos, std::string::npos);
  text.replace(pos, 40, "not-a-key");
  WriteRaw(Path("d.json"), text);
  auto bad_admin = ReadConnectionInfo(Path("d.json"));
  EXPECT_EQ(bad_admin.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(bad_admin.status().message().find("admin"), std::string::npos);
}

TEST_F(KeysTest, JoinFileErrorsAreClear) {
  auto missing = ReadJoinFile(Path("join.json"));
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("copy <state-dir>/join.json"), std::string::npos);
  WriteRaw(Path("a.json"), "[]");
  EXPECT_EQ(ReadJoinFile(Path("a.json")).status().code(), StatusCode::kCorrupt);
  const ConnectionInfo info = SampleInfo();
  WriteRaw(Path("b.json"), R"({"address": "tcp://x:1", "job": "j", "server_public": ")" +
                               info.server_public + R"(", "worker": {"public": ")" +
                               info.worker.public_key + R"("}})");
  auto no_secret = ReadJoinFile(Path("b.json"));
  EXPECT_EQ(no_secret.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(no_secret.status().message().find("secret"), std::string::npos);
  WriteRaw(Path("c.json"), R"({"job": "j"})");
  auto no_address = ReadJoinFile(Path("c.json"));
  EXPECT_EQ(no_address.status().code(), StatusCode::kCorrupt);
  EXPECT_NE(no_address.status().message().find("address"), std::string::npos);
}

TEST_F(KeysTest, AtomicWriteFailsCleanlyInMissingDirectory) {
  Status s = WriteFileAtomically(Path("no/such/dir/file"), "x", 0600);
  EXPECT_FALSE(s.ok());
}

}  // namespace
}  // namespace elastra
