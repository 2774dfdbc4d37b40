! The Fortran side of tests/test_export.py: driver.c's program (same files, same exit codes)
! through the module hpc_refer_policy (Fortran 2018: error stop with the code).
program driver
  use, intrinsic :: iso_fortran_env, only: int32, real64
  use hpc_refer_policy
  implicit none
  type(hpc_refer_policy_t) :: policy
  character(len=4096) :: dir, steps_file, actions_file
  character(len=512) :: message
  integer(int32) :: dims(4), start
  real(real64), allocatable :: state(:, :), action(:, :)
  integer :: ierr, t, in, out

  call get_command_argument(1, dir)
  call get_command_argument(2, steps_file)
  call get_command_argument(3, actions_file)
  call hpc_refer_policy_load(policy, dir, ierr, message)
  if (ierr /= HPC_REFER_OK) then
    print '(a, i0, a, a)', 'error ', ierr, ': ', trim(message)
    error stop ierr
  end if
  open(newunit=in, file=steps_file, access='stream', form='unformatted', status='old')
  open(newunit=out, file=actions_file, access='stream', form='unformatted', status='replace')
  read(in) dims
  allocate(state(dims(3), dims(2)), action(dims(4), dims(2)))
  do t = 1, dims(1)
    read(in) start, state
    if (start /= 0) call hpc_refer_policy_reset(policy)
    if (dims(2) == 1) then
      call hpc_refer_policy_act(policy, state(:, 1), action(:, 1), ierr)
    else
      call hpc_refer_policy_act(policy, state, action, ierr)
    end if
    if (ierr /= HPC_REFER_OK) then
      print '(a, i0, a, a)', 'error ', ierr, ': ', hpc_refer_policy_message(policy)
      error stop ierr
    end if
    write(out) action
  end do
  close(in)
  close(out)
  call hpc_refer_policy_free(policy)
end program driver
