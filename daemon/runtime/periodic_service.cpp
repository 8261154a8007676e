#include "runtime/periodic_service.h"

#include <algorithm>
#include <exception>
#include <stdexcept>
#include <utility>

#include <spdlog/spdlog.h>

namespace akadzed {

namespace {

PeriodicService::Duty Checked(PeriodicService::Duty duty) {
  const std::string& name = duty.name;
  const bool word = !name.empty() && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || c == '_';
  });
  if (!word) throw std::invalid_argument("a duty's name is a word of [a-z_]: \"" + name + "\"");
  return duty;
}

}  // namespace

PeriodicService::PeriodicService(Duty duty, const ServiceClock& clock)
    : duty_(Checked(std::move(duty))),
      guard_(clock, LoopBackoff(duty_.interval, duty_.interval)),
      loop_(clock) {}

PeriodicService::~PeriodicService() { Stop(); }

void PeriodicService::Start() {
  loop_.Start(duty_.thread, [this] {
    while (!loop_.Sleep(duty_.interval)) RunRound();
  });
}

void PeriodicService::Stop() { loop_.Stop(); }

void PeriodicService::RunRound() {
  try {
    // A round that sent nothing says nothing of the database.
    if (Round()) {
      if (auto ended = guard_.Succeeded()) {
        spdlog::info("{}_recovered failures={} outage_ms={}", duty_.name, ended->failures, ended->ms);
      }
    }
  } catch (const std::exception&) {
    const RoundFailure f = guard_.Failed(std::current_exception());
    if (duty_.on_failure) duty_.on_failure(f);
    const spdlog::level::level_enum level = std::min(f.level, duty_.level_cap);
    spdlog::log(level, "{}_failed | {}", duty_.name, f.message);
  }
  loop_.MarkRound();
}

}  // namespace akadzed
