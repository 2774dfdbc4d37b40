! agents: several agents in one simulation, coupled to hpc_refer through
! solvers/coupling/hpc_refer_client.f90 (protocol 3); the Fortran twin of agents.c and
! solver.py (same dynamics, same numbers; see agents.c). Agent indices are 0..n-1 as on the
! wire and in episodes.csv. Options: --agents K (default 3), --send-done.
!
! Build: mpifort -O2 ../../coupling/hpc_refer_client.f90 agents.f90 -o agents_f
program agents
  use hpc_refer_client
  implicit none
  integer, parameter :: OBS_DIM = 3
  double precision, parameter :: DT = 0.1d0, COUPLING = 0.5d0
  type(hpc_refer_t) :: c
  integer :: n, horizon, t, k, seed, cmd, i, ios
  logical :: send_done, found
  character(len=64) :: arg, value
  double precision :: mean, state(OBS_DIM), action(1)
  double precision, allocatable :: x(:), reward(:), actions(:)
  integer, allocatable :: status(:)
  logical, allocatable :: sends(:)
  n = 3
  send_done = .false.
  i = 1
  do while (i <= command_argument_count())
     call get_command_argument(i, arg)
     if (arg == '--agents') then
        i = i + 1
        call get_command_argument(i, arg)
        read (arg, *, iostat=ios) n
     else if (arg == '--send-done') then
        send_done = .true.
     end if
     i = i + 1
  end do
  call hpc_refer_init(c, OBS_DIM, 1, [-1d0], [1d0], metrics=[character(len=6) :: 'x_mean'], &
       n_agents=n)
  horizon = 20
  call hpc_refer_param(c, 'horizon', value, found)
  if (found) read (value, *) horizon
  allocate (x(0:n - 1), reward(0:n - 1), status(0:n - 1), sends(0:n - 1), actions(n))
  x = 0d0
  reward = 0d0
  status = HPC_REFER_CONTINUE
  sends = .true.
  t = 0
  do
     call hpc_refer_recv_action(c, actions, seed, cmd)
     if (cmd == HPC_REFER_STOP) exit
     if (cmd == HPC_REFER_RESET) then
        t = 0
        do k = 0, n - 1
           x(k) = 0.5d0 * (k + 1) / n + 0.01d0 * mod(max(seed, 0), 10)
        end do
        status = HPC_REFER_CONTINUE
        reward = 0d0
        sends = .true.
     else
        t = t + 1
        mean = sum(x) / n
        do k = 0, n - 1
           sends(k) = status(k) == HPC_REFER_CONTINUE
           if (.not. sends(k)) cycle   ! done: its action is the policy mean, ignored
           call hpc_refer_recv_action_agent(c, k, action)
           x(k) = x(k) + DT * (action(1) + COUPLING * (mean - x(k)))
           reward(k) = -(x(k) * x(k))
           if (abs(x(k)) > 2d0) then
              status(k) = HPC_REFER_TERMINAL
           else if (t >= horizon - k) then
              status(k) = HPC_REFER_TRUNCATED
           end if
        end do
     end if
     mean = sum(x) / n
     do k = 0, n - 1
        if (.not. (sends(k) .or. send_done)) cycle
        state = [x(k), mean, dble(t) / horizon]
        call hpc_refer_send_state_agent(c, k, status(k), t, reward(k), state)
     end do
     call hpc_refer_send_step_end(c, t, values=[mean])
  end do
  call hpc_refer_finalize(c)
end program agents
