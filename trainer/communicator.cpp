// communicator.cpp: factory for the single-process communicator.
#include "ft/trainer/communicator.h"

namespace ft::trainer {

std::unique_ptr<Communicator> make_local_communicator() {
  return std::make_unique<LocalCommunicator>();
}

}  // namespace ft::trainer
