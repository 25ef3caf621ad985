#include "coordinator/journal_location.h"

#include "journal/etcd_storage.h"
#include "journal/file_storage.h"

namespace elastra::coordinator {

StatusOr<std::unique_ptr<journal::JournalStorage>> OpenJournalStorage(
    const CoordinatorOptions& options) {
  if (options.etcd.empty()) {
    return std::unique_ptr<journal::JournalStorage>(std::make_unique<journal::FileJournalStorage>(
        options.state_dir + "/journal.bin", options.env));
  }
  journal::EtcdOptions etcd;
  etcd.endpoints = options.etcd;
  auto storage = journal::EtcdJournalStorage::Create(std::move(etcd), options.job);
  if (!storage.ok()) return storage.status();
  if (!options.etcd_fence_key.empty()) {
    (*storage)->SetFence({options.etcd_fence_key, options.etcd_fence_revision});
  }
  return std::unique_ptr<journal::JournalStorage>(std::move(storage).value());
}

std::string JournalLocation(const CoordinatorOptions& options) {
  if (options.etcd.empty()) return "file " + options.state_dir + "/journal.bin";
  return "etcd " + options.etcd + " /elastra/" + options.job + "/";
}

}  // namespace elastra::coordinator
